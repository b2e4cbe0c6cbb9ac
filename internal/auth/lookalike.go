package auth

import (
	"unicode"

	"go.mau.fi/util/confusable"
	"golang.org/x/text/unicode/norm"
)

// lookAlike reports whether an identifier could be mistaken for another by
// a person reading it, by Unicode's rules for identifiers (UTS #39):
//
//   - not in NFKC: a decomposed mark ("e" + U+0301 shows as "é"), or a
//     compatibility character that shows as plain letters (fullwidth
//     "ａｄｍｉｎ", the ligature "ﬁ", "…" for "...");
//   - mixed scripts beyond the Highly Restrictive level (section 5.2):
//     "demo-аdmin" with a Cyrillic а is Latin and Cyrillic; one script, or
//     Latin with the Han-based combinations of Japanese, Chinese (Bopomofo)
//     and Korean, is allowed;
//   - a whole-script look-alike of an ASCII name: not ASCII, yet its
//     skeleton (section 4, Unicode's confusables data) is, like the
//     Cyrillic "сосо" for "coco" or "admın" with a dotless ı.
//
// The character data is Unicode's: Go's script tables, x/text's
// normalization and go.mau.fi/util/confusable's confusables.
func lookAlike(s string) bool {
	if isASCII(s) {
		return false
	}
	if !norm.NFKC.IsNormalString(s) {
		return true
	}
	if !highlyRestrictive(s) {
		return true
	}
	return isASCII(confusable.Skeleton(s))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// highlyRestrictive reports whether s meets UTS #39's Highly Restrictive
// level: its scripts (Common and Inherited characters go with any) are
// one, or a subset of Latin + Han + Hiragana + Katakana, Latin + Han +
// Bopomofo, or Latin + Han + Hangul.
func highlyRestrictive(s string) bool {
	used := map[string]bool{}
	for _, r := range s {
		if name := scriptOf(r); name != "Common" && name != "Inherited" {
			used[name] = true
		}
	}
	if len(used) <= 1 {
		return true
	}
	for _, allowed := range [][]string{
		{"Latin", "Han", "Hiragana", "Katakana"},
		{"Latin", "Han", "Bopomofo"},
		{"Latin", "Han", "Hangul"},
	} {
		covered := 0
		for _, name := range allowed {
			if used[name] {
				covered++
			}
		}
		if covered == len(used) {
			return true
		}
	}
	return false
}

// scriptOf is the Unicode Script property of r ("Unknown" if none).
func scriptOf(r rune) string {
	switch {
	case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'):
		return "Latin"
	case r < 0x80:
		return "Common"
	}
	for name, table := range unicode.Scripts {
		if unicode.Is(table, r) {
			return name
		}
	}
	return "Unknown"
}

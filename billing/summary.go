package billing

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// summarize is the sentence a human reads before agreeing. It is built only
// from the confirmation's terms, so it states exactly what the second call
// executes, and it is deterministic: the same terms give the same text.
func summarize(orgName string, op Operation, from, to Plan, t Terms) string {
	verb := "Upgrade"
	if op == OpDowngrade {
		verb = "Downgrade"
	}
	head := fmt.Sprintf("%s %s from %s (%s) to %s (%s).",
		verb, orgName, from.Name, formatPrice(from), to.Name, formatPrice(to))
	date := t.NextChargeAt.UTC().Format("Jan 2, 2006")
	next := fmt.Sprintf("first full %s charge on %s.", to.Name, date)
	if to.AmountCents == 0 {
		next = fmt.Sprintf("no charges from %s.", date)
	}
	var text string
	switch {
	case op == OpUpgrade:
		text = fmt.Sprintf("%s Pro-rated to today: %s; %s", head, dueNowPhrase(t), next)
	case t.CreditCents > 0:
		text = fmt.Sprintf("%s Nothing is charged now; a pro-rated credit of %s goes to the next invoice; %s",
			head, formatMoney(t.CreditCents, t.Currency), next)
	default:
		text = fmt.Sprintf("%s Nothing is charged now; %s", head, next)
	}
	if !t.Livemode {
		text += " " + TestModeNotice
	}
	return text
}

// TestModeNotice ends every summary made with a test-mode payment key
// (contract §11), so nobody mistakes a rehearsal for a charge.
const TestModeNotice = "Test mode: no real money moves."

const maxDisplayNameRunes = 80

// DisplayName makes an org name safe to put in front of a human: control,
// format (zero-width, bidirectional overrides), private-use and
// variation-selector characters are removed, so a name cannot hide or
// reorder text in the summary; runs of white space become one space; long
// names are cut. It returns "" when nothing printable is left.
func DisplayName(name string) string {
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, "")
	}
	var b strings.Builder
	pendingSpace := false
	runes := 0
	for _, r := range name {
		switch {
		case unicode.IsSpace(r) || unicode.In(r, unicode.Zl, unicode.Zp):
			pendingSpace = b.Len() > 0
			continue
		case invisible(r):
			continue
		}
		width := 1
		if pendingSpace {
			width = 2
		}
		if runes+width > maxDisplayNameRunes {
			b.WriteString("…")
			break
		}
		if pendingSpace {
			b.WriteByte(' ')
			pendingSpace = false
		}
		b.WriteRune(r)
		runes += width
	}
	return b.String()
}

func invisible(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Variation_Selector) ||
		r == '\u115F' || r == '\u1160' || r == '\u3164' || r == '\uFFA0' || // Hangul fillers render blank
		!unicode.IsPrint(r) && r != ' '
}

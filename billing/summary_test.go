package billing

import (
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"
	"time"
	"unicode"
	"unicode/utf8"
)

func testPlan(t *testing.T, id string) Plan {
	t.Helper()
	for _, p := range DefaultPlans() {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no default plan %q", id)
	return Plan{}
}

func TestSummarize(t *testing.T) {
	may30 := time.Date(2026, 5, 30, 0, 0, 0, 0, time.UTC)
	yearly := func(p Plan, cents int64) Plan { p.Interval, p.AmountCents = "year", cents; return p }
	tests := []struct {
		name     string
		org      string
		op       Operation
		from, to string
		edit     func(from, to *Plan) // optional changes to the plans
		terms    Terms
		testMode bool
		want     string
	}{
		{
			name: "upgrade", org: "Vector Build", op: OpUpgrade, from: "pro", to: "scale",
			terms: Terms{AmountDueCents: 1742, Currency: "usd", NextChargeAt: may30},
			want:  "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.42 due now; first full Scale charge on May 30, 2026.",
		},
		{
			// Every amount counts every seat; the prices are each seat's.
			name: "upgrade with five seats", org: "Vector Build", op: OpUpgrade, from: "pro", to: "scale",
			terms: Terms{AmountDueCents: 8710, Quantity: 5, Currency: "usd", NextChargeAt: may30},
			want:  "Upgrade Vector Build from Pro ($19/mo per seat) to Scale ($49/mo per seat), 5 seats. Pro-rated to today: $87.10 due now; first full Scale charge on May 30, 2026.",
		},
		{
			name: "upgrade nothing due", org: "Vector Build", op: OpUpgrade, from: "free", to: "pro",
			terms: Terms{AmountDueCents: 0, Currency: "usd", NextChargeAt: may30},
			want:  "Upgrade Vector Build from Free ($0/mo) to Pro ($19/mo). Pro-rated to today: $0.00 due now; first full Pro charge on May 30, 2026.",
		},
		{
			name: "upgrade yearly", org: "Vector Build", op: OpUpgrade, from: "pro", to: "scale",
			edit:  func(from, to *Plan) { *from, *to = yearly(*from, 19000), yearly(*to, 49050) },
			terms: Terms{AmountDueCents: 123456, Currency: "usd", NextChargeAt: may30},
			want:  "Upgrade Vector Build from Pro ($190/yr) to Scale ($490.50/yr). Pro-rated to today: $1,234.56 due now; first full Scale charge on May 30, 2026.",
		},
		{
			name: "downgrade with credit", org: "Vector Build", op: OpDowngrade, from: "scale", to: "pro",
			terms: Terms{CreditCents: 1742, Currency: "usd", NextChargeAt: may30},
			want:  "Downgrade Vector Build from Scale ($49/mo) to Pro ($19/mo). Nothing is charged now; a pro-rated credit of $17.42 goes to the next invoice; first full Pro charge on May 30, 2026.",
		},
		{
			name: "downgrade without credit", org: "Vector Build", op: OpDowngrade, from: "scale", to: "pro",
			terms: Terms{CreditCents: 0, Currency: "usd", NextChargeAt: may30},
			want:  "Downgrade Vector Build from Scale ($49/mo) to Pro ($19/mo). Nothing is charged now; first full Pro charge on May 30, 2026.",
		},
		{
			name: "downgrade to free with credit", org: "Vector Build", op: OpDowngrade, from: "pro", to: "free",
			terms: Terms{CreditCents: 1140, Currency: "usd", NextChargeAt: may30},
			want:  "Downgrade Vector Build from Pro ($19/mo) to Free ($0/mo). Nothing is charged now; a pro-rated credit of $11.40 goes to the next invoice; no charges from May 30, 2026.",
		},
		{
			name: "downgrade to free without credit", org: "Vector Build", op: OpDowngrade, from: "pro", to: "free",
			terms: Terms{Currency: "usd", NextChargeAt: may30},
			want:  "Downgrade Vector Build from Pro ($19/mo) to Free ($0/mo). Nothing is charged now; no charges from May 30, 2026.",
		},
		{
			// The date is the UTC date, whatever zone the time came in.
			name: "next charge date in UTC", org: "Vector Build", op: OpUpgrade, from: "pro", to: "scale",
			terms: Terms{AmountDueCents: 1742, Currency: "usd",
				NextChargeAt: time.Date(2026, 5, 30, 2, 0, 0, 0, time.FixedZone("UTC+5", 5*3600))},
			want: "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.42 due now; first full Scale charge on May 29, 2026.",
		},
		{
			name: "single digit day", org: "Acme", op: OpUpgrade, from: "pro", to: "scale",
			terms: Terms{AmountDueCents: 5, Currency: "usd", NextChargeAt: time.Date(2027, 1, 3, 12, 0, 0, 0, time.UTC)},
			want:  "Upgrade Acme from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $0.05 due now; first full Scale charge on Jan 3, 2027.",
		},
		{
			name: "test mode", org: "Vector Build", op: OpUpgrade, from: "pro", to: "scale", testMode: true,
			terms: Terms{AmountDueCents: 1742, Currency: "usd", NextChargeAt: may30},
			want:  "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.42 due now; first full Scale charge on May 30, 2026. Test mode: no real money moves.",
		},
		{
			name: "test mode downgrade", org: "Vector Build", op: OpDowngrade, from: "scale", to: "pro", testMode: true,
			terms: Terms{Currency: "usd", NextChargeAt: may30},
			want:  "Downgrade Vector Build from Scale ($49/mo) to Pro ($19/mo). Nothing is charged now; first full Pro charge on May 30, 2026. Test mode: no real money moves.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to := testPlan(t, tt.from), testPlan(t, tt.to)
			tt.terms.Livemode = !tt.testMode
			if tt.edit != nil {
				tt.edit(&from, &to)
			}
			tt.terms.FromAmountCents, tt.terms.ToAmountCents = from.AmountCents, to.AmountCents // as termsFor sets them
			got := summarize(tt.org, operationsByName[tt.op], from, to, tt.terms, "")
			if got != tt.want {
				t.Errorf("summarize =\n  %q\nwant\n  %q", got, tt.want)
			}
			for range 100 {
				if again := summarize(tt.org, operationsByName[tt.op], from, to, tt.terms, ""); again != got {
					t.Fatalf("not deterministic: %q then %q", got, again)
				}
			}
		})
	}
}

func TestDisplayName(t *testing.T) {
	a80 := strings.Repeat("a", 80)
	tests := []struct {
		name, in, want string
	}{
		{"plain", "Vector Build", "Vector Build"},
		{"empty", "", ""},
		{"only spaces", " \t\n ", ""},
		{"only invisible", "\u200B\u202E\uFEFF", ""},
		{"NUL", "Acme\x00Corp", "AcmeCorp"},
		{"escape sequence", "Acme\x1b[31mRed", "Acme[31mRed"},
		{"DEL and C1", "Ac\x7fme\u0080\u009b", "Acme"},
		{"bell and backspace", "Acme\a\b Corp", "Acme Corp"},
		{"zero width space", "Ac\u200Bme", "Acme"},
		{"word joiner", "Ac\u2060me", "Acme"},
		{"BOM", "\uFEFFAcme\uFEFF", "Acme"},
		{"zero width joiner and non-joiner", "Ac\u200Cm\u200De", "Acme"},
		{"soft hyphen", "Ac\u00ADme", "Acme"},
		{"RLO", "Invoice\u202Efdp.exe", "Invoicefdp.exe"},
		{"LRE RLE PDF LRO", "\u202AA\u202Bc\u202Cm\u202De", "Acme"},
		{"isolates", "\u2066A\u2067c\u2068m\u2069e", "Acme"},
		{"LRM RLM ALM", "A\u200Ec\u200Fm\u061Ce", "Acme"},
		{"tag characters", "Acme\U000E0001\U000E0041\U000E0042\U000E007F", "Acme"},
		{"variation selectors", "Acme\uFE00\uFE0F", "Acme"},
		{"supplementary variation selector", "Acme\U000E0100\U000E01EF", "Acme"},
		{"emoji variation selector", "I \u2764\uFE0F Go", "I \u2764 Go"},
		{"private use", "Ac\uE000me\U000F0000\U0010FFFD", "Acme"},
		{"hangul fillers", "A\u3164c\u115Fm\u1160e\uFFA0", "Acme"},
		{"newline", "Acme\nCorp", "Acme Corp"},
		{"crlf", "Acme\r\nCorp", "Acme Corp"},
		{"tabs", "Acme\t\t\tCorp", "Acme Corp"},
		{"mixed white space run", "Acme \t\n\v\f\r Corp", "Acme Corp"},
		{"unicode spaces", "Acme\u00A0\u2003\u3000Corp", "Acme Corp"},
		{"line and paragraph separators", "Acme\u2028Corp\u2029Inc", "Acme Corp Inc"},
		{"NEL", "Acme\u0085Corp", "Acme Corp"},
		{"invisible between spaces", "Acme \u200B Corp", "Acme Corp"},
		{"leading and trailing", "   Acme Corp \t\n", "Acme Corp"},
		{"invalid UTF-8", "Ac\xffme\xc3", "Acme"},
		{"truncated sequence", "Acme\xe2\x82", "Acme"},
		{"overlong encoding", "Acme\xc0\xaf", "Acme"},
		{"encoded surrogate", "Acme\xed\xa0\x80", "Acme"},
		{"replacement char kept", "Acme\uFFFD", "Acme\uFFFD"},
		{"accents", "Café Zürich Ñandú", "Café Zürich Ñandú"},
		{"combining accent", "Cafe\u0301", "Cafe\u0301"},
		{"CJK", "日本語の会社 株式会社", "日本語の会社 株式会社"},
		{"arabic and hebrew", "شركة עברית", "شركة עברית"},
		{"emoji", "Rocket 🚀 Labs 😀", "Rocket 🚀 Labs 😀"},
		{"ZWJ emoji sequence loses the joiner", "Dev 👩\u200D💻", "Dev 👩💻"},
		{"80 runes", a80, a80},
		{"81 runes", a80 + "b", a80 + "…"},
		{"200 runes", strings.Repeat("é", 200), strings.Repeat("é", 80) + "…"},
		{"80 CJK then more", strings.Repeat("語", 81), strings.Repeat("語", 80) + "…"},
		{"invisible do not count", strings.Repeat("a\u200B", 80), a80},
		{"81st after a space", a80 + " b", a80 + "…"},
		{"trailing space after 80", a80 + "   ", a80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DisplayName(tt.in); got != tt.want {
				t.Errorf("DisplayName(%+q) = %+q, want %+q", tt.in, got, tt.want)
			}
		})
	}
}

// TestDisplayNameLengthCountsSpaces: white space counts towards
// maxDisplayNameRunes, as CreateOrg's "max 80 characters" promises.
func TestDisplayNameLengthCountsSpaces(t *testing.T) {
	in := strings.TrimSpace(strings.Repeat("a ", 100))
	if n := utf8.RuneCountInString(DisplayName(in)); n > maxDisplayNameRunes+1 {
		t.Errorf("DisplayName of %d runes is %d runes long, want at most %d", utf8.RuneCountInString(in), n, maxDisplayNameRunes+1)
	}
}

// checkDisplayName checks the invariants of DisplayName's output for any input.
func checkDisplayName(t testing.TB, in string) {
	t.Helper()
	out := DisplayName(in)
	if !utf8.ValidString(out) {
		t.Fatalf("DisplayName(%+q) = %+q: invalid UTF-8", in, out)
	}
	for _, r := range out {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) {
			t.Fatalf("DisplayName(%+q) = %+q contains %U", in, out, r)
		}
		if unicode.Is(unicode.Variation_Selector, r) || unicode.IsSpace(r) && r != ' ' {
			t.Fatalf("DisplayName(%+q) = %+q contains %U", in, out, r)
		}
	}
	if strings.HasPrefix(out, " ") || strings.HasSuffix(out, " ") || strings.Contains(out, "  ") {
		t.Fatalf("DisplayName(%+q) = %+q: untrimmed or uncollapsed space", in, out)
	}
	if again := DisplayName(out); again != out {
		t.Fatalf("not idempotent: DisplayName(%+q) = %+q, DisplayName of that = %+q", in, out, again)
	}
}

// interesting are the kinds of runes random names are built from.
var interesting = [][2]rune{
	{0x20, 0x7e},         // ASCII
	{0x00, 0x1f},         // C0
	{0x7f, 0x9f},         // DEL, C1
	{0x00a0, 0x024f},     // Latin-1, Latin Extended
	{0x0300, 0x036f},     // combining marks
	{0x0600, 0x06ff},     // Arabic (with Cf like U+061C, U+06DD)
	{0x1100, 0x1160},     // Hangul Jamo with fillers
	{0x2000, 0x206f},     // spaces, zero width, bidi, invisible operators
	{0x3000, 0x3164},     // CJK punctuation, Hangul filler
	{0x4e00, 0x4fff},     // CJK
	{0xd7f0, 0xdfff},     // around and in the surrogates
	{0xe000, 0xf8ff},     // private use
	{0xfe00, 0xfe0f},     // variation selectors
	{0xfff0, 0xffff},     // specials, noncharacters
	{0x1f300, 0x1faff},   // emoji
	{0xe0000, 0xe01ef},   // tags, supplementary variation selectors
	{0xf0000, 0x10ffff},  // supplementary private use
	{0x0000, 0x10ffff},   // anything
	{-1, -1},             // a random byte, often invalid UTF-8
	{' ', ' '},           // plain space
	{0x2026, 0x2026},     // the ellipsis DisplayName adds
	{0x200b, 0x200d},     // zero width
	{0x202a, 0x202e},     // bidi embeddings and overrides
	{0x2066, 0x2069},     // bidi isolates
	{0x1d173, 0x1d17a},   // musical format characters (Cf)
	{0x13430, 0x1343f},   // Egyptian hieroglyph format controls (Cf)
	{0xfff9, 0xfffb},     // interlinear annotation (Cf)
	{0x110bd, 0x110bd},   // Kaithi number sign (Cf)
	{0x0378, 0x0379},     // unassigned
	{0x1f1e6, 0x1f1ff},   // regional indicators
	{0x1f3fb, 0x1f3ff},   // skin tone modifiers
	{0x0e00, 0x0e7f},     // Thai
	{0x0900, 0x097f},     // Devanagari
	{0x10000, 0x1007f},   // Linear B
	{0x1d400, 0x1d7ff},   // mathematical letters
	{0xe0020, 0xe007f},   // tags only
	{0x180b, 0x180f},     // Mongolian variation selectors and vowel separator
	{0x00ad, 0x00ad},     // soft hyphen
	{0x034f, 0x034f},     // combining grapheme joiner
	{0x2060, 0x2064},     // word joiner, invisible operators
	{0xfeff, 0xfeff},     // BOM
	{0x0085, 0x0085},     // NEL
	{0x2028, 0x2029},     // line and paragraph separators
	{0x1680, 0x1680},     // ogham space
	{0x115f, 0x115f},     // Hangul choseong filler
	{0xffa0, 0xffa0},     // halfwidth Hangul filler
	{0x0600, 0x0605},     // Arabic number signs (Cf)
	{0x08e2, 0x08e2},     // Arabic disputed end of ayah (Cf)
	{0x070f, 0x070f},     // Syriac abbreviation mark (Cf)
	{0x0000, 0x0000},     // NUL
	{0xdc80, 0xdcff},     // lone low surrogates
	{0x10fffe, 0x10ffff}, // last noncharacters
}

func randomName(rng *rand.Rand) string {
	var b []byte
	for range rng.IntN(200) {
		span := interesting[rng.IntN(len(interesting))]
		if span[0] < 0 {
			b = append(b, byte(rng.IntN(256)))
			continue
		}
		r := span[0] + rng.Int32N(span[1]-span[0]+1)
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

func TestDisplayNameProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		checkDisplayName(t, randomName(rng))
	}
}

func TestDisplayNameQuick(t *testing.T) {
	noForbiddenRunes := func(s string) bool {
		out := DisplayName(s)
		for _, r := range out {
			if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) {
				return false
			}
		}
		return DisplayName(out) == out
	}
	if err := quick.Check(noForbiddenRunes, &quick.Config{MaxCount: 20_000}); err != nil {
		t.Error(err)
	}
	noForbiddenBytes := func(b []byte) bool { return noForbiddenRunes(string(b)) }
	if err := quick.Check(noForbiddenBytes, &quick.Config{MaxCount: 20_000}); err != nil {
		t.Error(err)
	}
}

func FuzzDisplayName(f *testing.F) {
	for _, seed := range []string{
		"", "Vector Build", "Acme\x00Corp", "Invoice\u202Efdp.exe", "\u2066x\u2069", "Acme\U000E0041",
		"I \u2764\uFE0F Go", "\uE000", " \t\n a \r\n b ", "Ac\xffme\xc3", strings.Repeat("a", 81),
		strings.Repeat("a ", 100), strings.Repeat("語", 90) + "\u200B", "Dev 👩\u200D💻", "\u3164\u115F",
		strings.Repeat("a", 80) + " …", "Café\u0301", "\xed\xa0\x80",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkDisplayName(t, in)
	})
}

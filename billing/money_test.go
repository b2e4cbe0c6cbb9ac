package billing

import (
	"sync"
	"testing"
)

func TestFormatMoney(t *testing.T) {
	tests := []struct {
		name     string
		minor    int64
		currency string
		want     string
	}{
		{"usd cents", 1742, "usd", "$17.42"},
		{"usd whole dollars keep cents", 1900, "usd", "$19.00"},
		{"usd zero", 0, "usd", "$0.00"},
		{"usd 5 cents", 5, "usd", "$0.05"},
		{"usd 10 cents", 10, "usd", "$0.10"},
		{"usd 99 cents", 99, "usd", "$0.99"},
		{"usd 1 dollar 1 cent", 101, "usd", "$1.01"},
		{"usd negative", -300, "usd", "-$3.00"},
		{"usd negative cents", -5, "usd", "-$0.05"},
		{"usd thousands", 123456, "usd", "$1,234.56"},
		{"usd exactly 1000", 100000, "usd", "$1,000.00"},
		{"usd 999.99", 99999, "usd", "$999.99"},
		{"usd millions", 123456789, "usd", "$1,234,567.89"},
		{"usd negative millions", -123456789, "usd", "-$1,234,567.89"},
		{"upper-case code", 1742, "USD", "$17.42"},
		{"jpy zero-decimal", 1900, "jpy", "¥1,900"},
		{"jpy small", 5, "jpy", "¥5"},
		{"jpy negative", -1900, "jpy", "-¥1,900"},
		{"krw zero-decimal with symbol", 1234567, "krw", "₩1,234,567"},
		{"clp zero-decimal without symbol", 1900, "clp", "1,900 CLP"},
		{"eur", 1742, "eur", "€17.42"},
		{"eur thousands", 250000, "eur", "€2,500.00"},
		{"gbp", 999, "gbp", "£9.99"},
		{"cad", 1900, "cad", "CA$19.00"},
		{"unknown currency", 1250, "chf", "12.50 CHF"},
		{"hkd from CLDR", 1250, "hkd", "HK$12.50"},
		{"cny from CLDR", 1250, "cny", "CN¥12.50"},
		{"xaf: letters only, zero-decimal", 1900, "xaf", "1,900 XAF"},
		{"not a currency code", 1250, "zzz", "12.50 ZZZ"},
		{"unknown currency upper-case", 1250, "CHF", "12.50 CHF"},
		{"unknown negative", -1250, "chf", "-12.50 CHF"},
		{"unknown thousands", 123456789, "sek", "1,234,567.89 SEK"},
		// Stripe's three-decimal currencies: counted in thousandths.
		{"kwd thousandths", 5120, "kwd", "5.120 KWD"},
		{"kwd upper-case", 5120, "KWD", "5.120 KWD"},
		{"kwd whole keeps its fraction", 5000, "kwd", "5.000 KWD"},
		{"kwd negative", -5120, "kwd", "-5.120 KWD"},
		{"kwd thousands", 1234560, "kwd", "1,234.560 KWD"},
		{"kwd below one", 50, "kwd", "0.050 KWD"},
		{"bhd", 5120, "bhd", "5.120 BHD"},
		{"jod", 5120, "jod", "5.120 JOD"},
		{"omr", 5120, "omr", "5.120 OMR"},
		{"tnd", 5120, "tnd", "5.120 TND"},
		// Stripe's special cases: counted in hundredths, written whole.
		{"isk in hundredths", 50000, "isk", "500 ISK"},
		{"isk thousands", 12345600, "isk", "123,456 ISK"},
		{"isk with a fraction keeps it", 50050, "isk", "500.50 ISK"},
		{"huf in hundredths", 50000, "huf", "500 HUF"},
		{"twd in hundredths", 50000, "twd", "NT$500"},
		// Counted in hundredths by Stripe although CLDR writes them whole.
		{"cop hundredths", 150000, "cop", "1,500.00 COP"},
		{"idr hundredths", 150000, "idr", "1,500.00 IDR"},
		// Zero-decimal, including UGX (whole units for charges).
		{"ugx zero-decimal", 5000, "ugx", "5,000 UGX"},
		{"krw small", 5, "krw", "₩5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatMoney(tt.minor, tt.currency); got != tt.want {
				t.Errorf("formatMoney(%d, %q) = %q, want %q", tt.minor, tt.currency, got, tt.want)
			}
		})
	}
}

func TestFormatPrice(t *testing.T) {
	plan := func(cents int64, currency, interval string) Plan {
		return Plan{ID: "p", Name: "P", AmountCents: cents, Currency: currency, Interval: interval, StripePriceID: "price_p"}
	}
	tests := []struct {
		name string
		plan Plan
		want string
	}{
		{"whole dollars", plan(1900, "usd", "month"), "$19/mo"},
		{"free", plan(0, "usd", "month"), "$0/mo"},
		{"with cents", plan(1950, "usd", "month"), "$19.50/mo"},
		{"5 cents", plan(5, "usd", "month"), "$0.05/mo"},
		{"yearly", plan(19000, "usd", "year"), "$190/yr"},
		{"yearly with cents", plan(1950, "usd", "year"), "$19.50/yr"},
		{"thousands", plan(123456700, "usd", "year"), "$1,234,567/yr"},
		{"thousands with cents", plan(123456789, "usd", "month"), "$1,234,567.89/mo"},
		{"eur", plan(4900, "eur", "month"), "€49/mo"},
		{"jpy", plan(1900, "jpy", "month"), "¥1,900/mo"},
		{"unknown currency", plan(1250, "chf", "month"), "12.50 CHF/mo"},
		{"unknown currency whole", plan(1200, "chf", "year"), "12 CHF/yr"},
		{"kwd", plan(5120, "kwd", "month"), "5.120 KWD/mo"},
		{"kwd whole", plan(5000, "kwd", "month"), "5 KWD/mo"},
		{"isk", plan(50000, "isk", "month"), "500 ISK/mo"},
		{"huf", plan(50000, "huf", "year"), "500 HUF/yr"},
		{"krw", plan(19000, "krw", "month"), "₩19,000/mo"},
		{"default catalog pro", testPlan(t, "pro"), "$19/mo"},
		{"default catalog scale", testPlan(t, "scale"), "$49/mo"},
		{"default catalog free", testPlan(t, "free"), "$0/mo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatPrice(tt.plan); got != tt.want {
				t.Errorf("formatPrice(%d %s %s) = %q, want %q", tt.plan.AmountCents, tt.plan.Currency, tt.plan.Interval, got, tt.want)
			}
		})
	}
}

func TestDigitsOf(t *testing.T) {
	tests := []struct {
		codes []string
		want  CurrencyDigits
	}{
		{[]string{"jpy", "krw", "JPY", "bif", "clp", "djf", "gnf", "kmf", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}, CurrencyDigits{Exponent: 0}},
		{[]string{"kwd", "bhd", "jod", "omr", "tnd", "KWD"}, CurrencyDigits{Exponent: 3}},
		{[]string{"isk", "huf", "twd", "ISK"}, CurrencyDigits{Exponent: 2, WrittenWhole: true}},
		// CLDR has 0 digits for COP and IDR; Stripe counts them in hundredths.
		{[]string{"usd", "eur", "cop", "idr", "chf", "zzz"}, CurrencyDigits{Exponent: 2}},
	}
	for _, tt := range tests {
		for _, code := range tt.codes {
			if got := DigitsOf(code); got != tt.want {
				t.Errorf("DigitsOf(%q) = %+v, want %+v", code, got, tt.want)
			}
		}
	}
}

// symbol keeps each code's answer: the second answer, and one asked for
// from many goroutines at once, is the first, for codes with a symbol, codes
// CLDR writes with letters only, and strings that are no ISO code (never
// kept).
func TestSymbolRemembered(t *testing.T) {
	codes := []string{"usd", "eur", "jpy", "krw", "cad", "hkd", "chf", "sek", "xaf", "USD", "zzz", "", "not a code"}
	type answer struct {
		sym string
		ok  bool
	}
	first := map[string]answer{}
	for _, c := range codes {
		sym, ok := symbol(c)
		first[c] = answer{sym, ok}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range codes {
				if sym, ok := symbol(c); (answer{sym, ok}) != first[c] {
					t.Errorf("symbol(%q) = %q, %v; first %+v", c, sym, ok, first[c])
				}
			}
		}()
	}
	wg.Wait()
	if first["usd"] != (answer{"$", true}) || first["chf"].ok || first["zzz"].ok {
		t.Errorf("answers %+v", first)
	}
	for _, c := range []string{"zzz", "", "not a code"} {
		if _, kept := symbols.Load(c); kept {
			t.Errorf("%q, no ISO code, was kept", c)
		}
	}
}

func BenchmarkFormatMoney(b *testing.B) {
	for b.Loop() {
		formatMoney(1742, "usd")
		formatMoney(1250, "chf")
	}
}

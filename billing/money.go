package billing

import (
	"strconv"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/text/currency"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// CurrencyDigits say how amounts in a currency are counted and written
// (contract §6). They go out with every amount (details, plans, receipts),
// because a page cannot learn them from the browser: ICU's currency data
// has 0 digits for ISK, HUF, COP and IDR, which Stripe counts in
// hundredths, so a browser left to itself writes 100× the amount.
type CurrencyDigits struct {
	// Exponent is the number of digits of the minor unit as Stripe counts
	// it: an amount of 5120 in kwd (exponent 3) is 5.120 KWD.
	Exponent int `json:"currency_exponent"`
	// WrittenWhole is true for Stripe's special cases, counted in
	// hundredths but written by people without a fraction: a zero fraction
	// is left out, so 50000 in isk is "500 ISK".
	WrittenWhole bool `json:"currency_written_whole"`
}

// DigitsOf are the digits of a currency (an ISO code, any case), from
// Stripe's currency table; 2 for every currency it does not list apart.
func DigitsOf(code string) CurrencyDigits {
	code = strings.ToLower(code)
	switch {
	case zeroDecimal[code]:
		return CurrencyDigits{Exponent: 0}
	case threeDecimal[code]:
		return CurrencyDigits{Exponent: 3}
	default:
		return CurrencyDigits{Exponent: 2, WrittenWhole: writtenWhole[code]}
	}
}

// Stripe's currency table, the one source of these digits in billingd.
var (
	// zeroDecimal: counted in whole units (Stripe's "zero-decimal
	// currencies"). UGX stays here although Stripe counts UGX payouts in
	// hundredths: billingd states charges, which Stripe counts whole.
	zeroDecimal = map[string]bool{
		"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
		"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
	}
	// threeDecimal: counted in thousandths (Stripe requires the last digit
	// to be 0, see NewCatalog).
	threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}
	// writtenWhole: Stripe's special cases, counted in hundredths although
	// people write them in whole units.
	writtenWhole = map[string]bool{"isk": true, "huf": true, "twd": true}
)

// symbol is the currency's symbol as English text writes it, from CLDR's
// data in golang.org/x/text/currency ("$", "€", "¥", "₩", "CA$", "HK$"),
// and false when CLDR has only letters for it ("CHF", "SEK", "FCFA"):
// such amounts are written with the ISO code after the number.
// (golang.org/x/text's own formatter is not used for the number: it goes
// through float64 and writes "$ 17.67" and "$ -3.00", not as people write
// them; and Stripe's minor units differ from ISO's for a few currencies.)
//
// CLDR's answer depends on the code alone, and asking x/text's printer for
// it cost about 1% of a first call's CPU (every quote formats amounts), so
// each code's answer is kept: ISO codes only (ParseISO refuses the rest),
// so the map stays as small as ISO 4217.
func symbol(code string) (string, bool) {
	if e, ok := symbols.Load(code); ok {
		e := e.(symbolEntry)
		return e.sym, e.ok
	}
	unit, err := currency.ParseISO(code)
	if err != nil {
		return "", false
	}
	e := symbolEntry{sym: symbolPrinter.Sprint(currency.Symbol(unit))}
	e.ok = strings.IndexFunc(e.sym, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0
	if !e.ok {
		e.sym = ""
	}
	symbols.Store(code, e)
	return e.sym, e.ok
}

// symbols maps a currency code symbol has been asked about to its answer.
var symbols sync.Map // string → symbolEntry

type symbolEntry struct {
	sym string
	ok  bool
}

var symbolPrinter = message.NewPrinter(language.English)

// formatMoney formats an amount in the currency's minor units for humans:
// "$17.42", "-$3.00", "¥1,900", "12.50 CHF".
func formatMoney(minor int64, currency string) string {
	return formatAmount(minor, currency, false)
}

// formatPrice formats a plan's recurring price: "$19/mo", "$19.50/yr".
func formatPrice(p Plan) string {
	unit := "/mo"
	if p.Interval == "year" {
		unit = "/yr"
	}
	return formatAmount(p.AmountCents, p.Currency, true) + unit
}

// formatAmount formats minor units with the currency's digits (DigitsOf);
// dropZeroFraction turns "$19.00" into "$19". A zero fraction is also left
// out for a currency people write whole ("500 ISK"), and pages do the same
// from the digits the server sends them (rest/web/common.js money).
func formatAmount(minor int64, code string, dropZeroFraction bool) string {
	code = strings.ToLower(code)
	digits := DigitsOf(code)
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	unit := pow10(digits.Exponent)
	number := groupThousands(minor / unit)
	if fraction := minor % unit; digits.Exponent > 0 && (fraction != 0 || !(dropZeroFraction || digits.WrittenWhole)) {
		number += "." + padDigits(fraction, digits.Exponent)
	}
	if sym, ok := symbol(code); ok {
		return sign + sym + number
	}
	return sign + number + " " + strings.ToUpper(code)
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// padDigits writes n with leading zeros to width digits: 5 → "005".
func padDigits(n int64, width int) string {
	s := strconv.FormatInt(n, 10)
	return strings.Repeat("0", width-len(s)) + s
}

package billing

import (
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/currency"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// zeroDecimal lists the currencies Stripe counts in whole units rather than
// hundredths (Stripe's "zero-decimal currencies").
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
	"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
}

// symbol is the currency's symbol as English text writes it, from CLDR's
// data in golang.org/x/text/currency ("$", "€", "¥", "₩", "CA$", "HK$"),
// and false when CLDR has only letters for it ("CHF", "SEK", "FCFA"):
// such amounts are written with the ISO code after the number.
// (golang.org/x/text's own formatter is not used for the number: it goes
// through float64 and writes "$ 17.67" and "$ -3.00", not as people write
// them; and Stripe's minor units differ from ISO's for a few currencies.)
func symbol(code string) (string, bool) {
	unit, err := currency.ParseISO(code)
	if err != nil {
		return "", false
	}
	sym := symbolPrinter.Sprint(currency.Symbol(unit))
	if strings.IndexFunc(sym, func(r rune) bool { return !unicode.IsLetter(r) }) < 0 {
		return "", false
	}
	return sym, true
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

// formatAmount formats minor units; dropWholeCents turns "$19.00" into "$19".
func formatAmount(minor int64, code string, dropWholeCents bool) string {
	code = strings.ToLower(code)
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	var number string
	if zeroDecimal[code] {
		number = groupThousands(minor)
	} else {
		number = groupThousands(minor / 100)
		if cents := minor % 100; cents != 0 || !dropWholeCents {
			number += "." + twoDigits(cents)
		}
	}
	if sym, ok := symbol(code); ok {
		return sign + sym + number
	}
	return sign + number + " " + strings.ToUpper(code)
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func twoDigits(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

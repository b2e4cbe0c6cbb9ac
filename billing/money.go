package billing

import (
	"strconv"
	"strings"
)

// zeroDecimal lists the currencies Stripe counts in whole units rather than
// hundredths (Stripe's "zero-decimal currencies").
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
	"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
}

var currencySymbols = map[string]string{
	"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥", "cad": "CA$", "aud": "A$", "inr": "₹", "krw": "₩",
}

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
func formatAmount(minor int64, currency string, dropWholeCents bool) string {
	currency = strings.ToLower(currency)
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	var number string
	if zeroDecimal[currency] {
		number = groupThousands(minor)
	} else {
		number = groupThousands(minor / 100)
		if cents := minor % 100; cents != 0 || !dropWholeCents {
			number += "." + twoDigits(cents)
		}
	}
	if sym, ok := currencySymbols[currency]; ok {
		return sign + sym + number
	}
	return sign + number + " " + strings.ToUpper(currency)
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

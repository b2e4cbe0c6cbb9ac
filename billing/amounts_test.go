package billing

import (
	"strings"
	"testing"
	"time"
)

// The summary names every part of the amount that is not zero, in the
// invoice's currency written as people write it (contract §6).
func TestSummaryStatesEveryPart(t *testing.T) {
	dec1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	plan := func(id, name string, cents int64, currency string) Plan {
		return Plan{ID: id, Name: name, AmountCents: cents, Currency: currency, Interval: "month", StripePriceID: "price_" + id}
	}
	tests := []struct {
		name     string
		from, to Plan
		terms    Terms
		want     string
	}{
		{
			name: "usd, no parts: as before",
			from: plan("pro", "Pro", 1900, "usd"), to: plan("scale", "Scale", 4900, "usd"),
			terms: Terms{AmountDueCents: 1767, SubtotalCents: 1767},
			want:  "Upgrade Acme from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.67 due now; first full Scale charge on Dec 1, 2026.",
		},
		{
			name: "usd, every part",
			from: plan("pro", "Pro", 1900, "usd"), to: plan("scale", "Scale", 4900, "usd"),
			terms: Terms{SubtotalCents: 1767, TaxCents: 253, DiscountCents: 500, CreditAppliedCents: 1000, AmountDueCents: 520},
			want: "Upgrade Acme from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.67 plus $2.53 tax, less a $5.00 discount; " +
				"$10.00 of account credit applied: $5.20 due now; first full Scale charge on Dec 1, 2026.",
		},
		{
			name: "usd, discount only",
			from: plan("pro", "Pro", 1900, "usd"), to: plan("scale", "Scale", 4900, "usd"),
			terms: Terms{SubtotalCents: 1767, DiscountCents: 354, AmountDueCents: 1413},
			want:  "Upgrade Acme from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.67 less a $3.54 discount: $14.13 due now; first full Scale charge on Dec 1, 2026.",
		},
		{
			name: "usd, credit covers it all",
			from: plan("pro", "Pro", 1900, "usd"), to: plan("scale", "Scale", 4900, "usd"),
			terms: Terms{SubtotalCents: 1767, CreditAppliedCents: 1767},
			want:  "Upgrade Acme from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.67; $17.67 of account credit applied: $0.00 due now; first full Scale charge on Dec 1, 2026.",
		},
		{
			name: "jpy, zero-decimal, with tax",
			from: plan("standard", "スタンダード", 1900, "jpy"), to: plan("premium", "Premium", 4900, "jpy"),
			terms: Terms{SubtotalCents: 1500, TaxCents: 150, AmountDueCents: 1650},
			want:  "Upgrade Acme from スタンダード (¥1,900/mo) to Premium (¥4,900/mo). Pro-rated to today: ¥1,500 plus ¥150 tax: ¥1,650 due now; first full Premium charge on Dec 1, 2026.",
		},
		{
			name: "krw, zero-decimal, thousands",
			from: plan("basic", "Basic", 25000, "krw"), to: plan("team", "Team", 1250000, "krw"),
			terms: Terms{SubtotalCents: 612500, DiscountCents: 61250, AmountDueCents: 551250},
			want:  "Upgrade Acme from Basic (₩25,000/mo) to Team (₩1,250,000/mo). Pro-rated to today: ₩612,500 less a ₩61,250 discount: ₩551,250 due now; first full Team charge on Dec 1, 2026.",
		},
		{
			name: "eur, tax and credit",
			from: plan("pro", "Pro", 1900, "eur"), to: plan("scale", "Scale", 4900, "eur"),
			terms: Terms{SubtotalCents: 1500, TaxCents: 285, CreditAppliedCents: 200, AmountDueCents: 1585},
			want:  "Upgrade Acme from Pro (€19/mo) to Scale (€49/mo). Pro-rated to today: €15.00 plus €2.85 tax; €2.00 of account credit applied: €15.85 due now; first full Scale charge on Dec 1, 2026.",
		},
		{
			name: "chf, written with its code",
			from: plan("pro", "Pro", 1900, "chf"), to: plan("scale", "Scale", 4900, "chf"),
			terms: Terms{SubtotalCents: 1500, TaxCents: 122, AmountDueCents: 1622},
			want:  "Upgrade Acme from Pro (19 CHF/mo) to Scale (49 CHF/mo). Pro-rated to today: 15.00 CHF plus 1.22 CHF tax: 16.22 CHF due now; first full Scale charge on Dec 1, 2026.",
		},
		// Stripe's three-decimal currencies: 5120 in kwd is 5.120 KWD,
		// not 51.20 (issue 27).
		{
			name: "kwd, three-decimal",
			from: plan("pro", "Pro", 5000, "kwd"), to: plan("scale", "Scale", 12500, "kwd"),
			terms: Terms{SubtotalCents: 4650, TaxCents: 470, AmountDueCents: 5120},
			want:  "Upgrade Acme from Pro (5 KWD/mo) to Scale (12.500 KWD/mo). Pro-rated to today: 4.650 KWD plus 0.470 KWD tax: 5.120 KWD due now; first full Scale charge on Dec 1, 2026.",
		},
		{name: "bhd, three-decimal", from: plan("pro", "Pro", 5000, "bhd"), to: plan("scale", "Scale", 12500, "bhd"),
			terms: Terms{AmountDueCents: 5120}, want: "Upgrade Acme from Pro (5 BHD/mo) to Scale (12.500 BHD/mo). Pro-rated to today: 5.120 BHD due now; first full Scale charge on Dec 1, 2026."},
		{name: "jod, three-decimal", from: plan("pro", "Pro", 5000, "jod"), to: plan("scale", "Scale", 12500, "jod"),
			terms: Terms{AmountDueCents: 5120}, want: "Upgrade Acme from Pro (5 JOD/mo) to Scale (12.500 JOD/mo). Pro-rated to today: 5.120 JOD due now; first full Scale charge on Dec 1, 2026."},
		{name: "omr, three-decimal", from: plan("pro", "Pro", 5000, "omr"), to: plan("scale", "Scale", 12500, "omr"),
			terms: Terms{AmountDueCents: 5120}, want: "Upgrade Acme from Pro (5 OMR/mo) to Scale (12.500 OMR/mo). Pro-rated to today: 5.120 OMR due now; first full Scale charge on Dec 1, 2026."},
		{name: "tnd, three-decimal", from: plan("pro", "Pro", 5000, "tnd"), to: plan("scale", "Scale", 12500, "tnd"),
			terms: Terms{AmountDueCents: 5120}, want: "Upgrade Acme from Pro (5 TND/mo) to Scale (12.500 TND/mo). Pro-rated to today: 5.120 TND due now; first full Scale charge on Dec 1, 2026."},
		// Stripe's special cases: counted in hundredths, written whole.
		{
			name: "isk, hundredths written whole",
			from: plan("pro", "Pro", 190000, "isk"), to: plan("scale", "Scale", 490000, "isk"),
			terms: Terms{SubtotalCents: 40000, TaxCents: 10000, AmountDueCents: 50000},
			want:  "Upgrade Acme from Pro (1,900 ISK/mo) to Scale (4,900 ISK/mo). Pro-rated to today: 400 ISK plus 100 ISK tax: 500 ISK due now; first full Scale charge on Dec 1, 2026.",
		},
		{name: "huf, hundredths written whole", from: plan("pro", "Pro", 190000, "huf"), to: plan("scale", "Scale", 490000, "huf"),
			terms: Terms{AmountDueCents: 50000}, want: "Upgrade Acme from Pro (1,900 HUF/mo) to Scale (4,900 HUF/mo). Pro-rated to today: 500 HUF due now; first full Scale charge on Dec 1, 2026."},
		{name: "twd, hundredths written whole", from: plan("pro", "Pro", 190000, "twd"), to: plan("scale", "Scale", 490000, "twd"),
			terms: Terms{AmountDueCents: 50000}, want: "Upgrade Acme from Pro (NT$1,900/mo) to Scale (NT$4,900/mo). Pro-rated to today: NT$500 due now; first full Scale charge on Dec 1, 2026."},
		// CLDR writes COP and IDR whole; Stripe counts them in hundredths.
		{name: "cop, hundredths", from: plan("pro", "Pro", 190000, "cop"), to: plan("scale", "Scale", 490000, "cop"),
			terms: Terms{AmountDueCents: 150000}, want: "Upgrade Acme from Pro (1,900 COP/mo) to Scale (4,900 COP/mo). Pro-rated to today: 1,500.00 COP due now; first full Scale charge on Dec 1, 2026."},
		{name: "idr, hundredths", from: plan("pro", "Pro", 190000, "idr"), to: plan("scale", "Scale", 490000, "idr"),
			terms: Terms{AmountDueCents: 150000}, want: "Upgrade Acme from Pro (1,900 IDR/mo) to Scale (4,900 IDR/mo). Pro-rated to today: 1,500.00 IDR due now; first full Scale charge on Dec 1, 2026."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.terms.Currency, tt.terms.NextChargeAt, tt.terms.Livemode = tt.to.Currency, dec1, true
			tt.terms.FromAmountCents, tt.terms.ToAmountCents = tt.from.AmountCents, tt.to.AmountCents
			if got := summarize("Acme", upgradePlan, tt.from, tt.to, tt.terms, ""); got != tt.want {
				t.Errorf("summary\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}

// The parts are Stripe's; billing only checks that they add up, and never
// states a sum that is not one.
func TestAmountParts(t *testing.T) {
	tests := []struct {
		name    string
		due     int64
		p       Preview
		want    Terms
		wantErr string
	}{
		{"no parts: the amount is its own subtotal", 1767, Preview{AmountDueNowCents: 1767},
			Terms{AmountDueCents: 1767, SubtotalCents: 1767}, ""},
		{"every part", 520, Preview{SubtotalCents: 1767, DiscountCents: 500, TaxCents: 253, CreditAppliedCents: 1000},
			Terms{AmountDueCents: 520, SubtotalCents: 1767, DiscountCents: 500, TaxCents: 253, CreditAppliedCents: 1000}, ""},
		{"parts that do not add up", 600, Preview{SubtotalCents: 1767, DiscountCents: 500, TaxCents: 253, CreditAppliedCents: 1000},
			Terms{AmountDueCents: 600}, "add up to 520, not the 600 due"},
		{"a negative part", 2267, Preview{SubtotalCents: 1767, DiscountCents: -500},
			Terms{AmountDueCents: 2267}, "negative part"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			terms := Terms{AmountDueCents: tt.due}
			err := amountParts(&terms, tt.p)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if terms != tt.want {
				t.Errorf("terms = %+v, want %+v", terms, tt.want)
			}
		})
	}
}

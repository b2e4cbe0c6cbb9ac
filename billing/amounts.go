package billing

import (
	"fmt"
	"strings"
)

// Every part of the amount (contract §6). Stripe's amount_due already nets
// discounts, tax and the customer's credit balance; a person who reads only
// that figure cannot tell why it is what it is, and one who reads only the
// prorated price is surprised by the charge. So a quote states each part
// the preview gives, and the confirmation is bound to all of them:
//
//	amount due now = subtotal − discount + tax − credit applied
//
// The parts come from the provider (Preview); billing never computes them,
// it only checks that they add up before it states them.

// amountParts sets the parts of an amount charged now on t from the
// preview, and refuses a preview whose parts do not add up to what it
// says is due: billingd never states a sum that is not one.
func amountParts(t *Terms, p Preview) error {
	a := Amounts{AmountDueCents: t.AmountDueCents, SubtotalCents: p.SubtotalCents, DiscountCents: p.DiscountCents,
		TaxCents: p.TaxCents, CreditAppliedCents: p.CreditAppliedCents}
	if err := checkParts(&a); err != nil {
		return fmt.Errorf("preview: %w", err)
	}
	t.SubtotalCents, t.DiscountCents, t.TaxCents, t.CreditAppliedCents =
		a.SubtotalCents, a.DiscountCents, a.TaxCents, a.CreditAppliedCents
	return nil
}

// checkParts refuses amounts whose parts do not add up to the amount due.
// Parts all zero (a provider that gives none: stripe-mock's fixtures, an
// empty invoice) make the amount its own subtotal.
func checkParts(a *Amounts) error {
	if a.SubtotalCents == 0 && a.DiscountCents == 0 && a.TaxCents == 0 && a.CreditAppliedCents == 0 {
		a.SubtotalCents = a.AmountDueCents
		return nil
	}
	if a.DiscountCents < 0 || a.TaxCents < 0 || a.CreditAppliedCents < 0 {
		return fmt.Errorf("amounts have a negative part: discount %d, tax %d, credit %d", a.DiscountCents, a.TaxCents, a.CreditAppliedCents)
	}
	if sum := a.SubtotalCents - a.DiscountCents + a.TaxCents - a.CreditAppliedCents; sum != a.AmountDueCents {
		return fmt.Errorf("parts add up to %d, not the %d due (subtotal %d, discount %d, tax %d, credit %d)",
			sum, a.AmountDueCents, a.SubtotalCents, a.DiscountCents, a.TaxCents, a.CreditAppliedCents)
	}
	return nil
}

// dueNowPhrase states the amount charged now with each part that is not
// zero, in the invoice's currency:
//
//	"$17.67 due now"
//	"$17.67 plus $2.53 tax, less a $5.00 discount; $10.00 of account credit applied: $5.20 due now"
func dueNowPhrase(t Terms) string {
	return amountPhrase(Amounts{AmountDueCents: t.AmountDueCents, SubtotalCents: t.SubtotalCents,
		DiscountCents: t.DiscountCents, TaxCents: t.TaxCents, CreditAppliedCents: t.CreditAppliedCents},
		t.Currency, "due now")
}

// amountPhrase states an amount with each part that is not zero, followed
// by what it is ("due now", "charged then").
func amountPhrase(a Amounts, currency, what string) string {
	money := func(minor int64) string { return formatMoney(minor, currency) }
	if a.DiscountCents == 0 && a.TaxCents == 0 && a.CreditAppliedCents == 0 {
		return money(a.AmountDueCents) + " " + what
	}
	var b strings.Builder
	b.WriteString(money(a.SubtotalCents))
	if a.TaxCents != 0 {
		b.WriteString(" plus " + money(a.TaxCents) + " tax")
	}
	if a.DiscountCents != 0 {
		if a.TaxCents != 0 {
			b.WriteString(",")
		}
		b.WriteString(" less a " + money(a.DiscountCents) + " discount")
	}
	if a.CreditAppliedCents != 0 {
		b.WriteString("; " + money(a.CreditAppliedCents) + " of account credit applied")
	}
	b.WriteString(": " + money(a.AmountDueCents) + " " + what)
	return b.String()
}

// QuotedAmounts are the parts of the amount a receipt's summary stated, as
// the confirmation was bound to them (ReceiptClaims.Quoted).
type QuotedAmounts struct {
	SubtotalCents      int64 `json:"subtotal_cents"`
	DiscountCents      int64 `json:"discount_cents"`
	TaxCents           int64 `json:"tax_cents"`
	CreditAppliedCents int64 `json:"credit_applied_cents"`
	AmountDueNowCents  int64 `json:"amount_due_now_cents"`
}

func quotedAmounts(t Terms) *QuotedAmounts {
	return &QuotedAmounts{SubtotalCents: t.SubtotalCents, DiscountCents: t.DiscountCents, TaxCents: t.TaxCents,
		CreditAppliedCents: t.CreditAppliedCents, AmountDueNowCents: t.AmountDueCents}
}

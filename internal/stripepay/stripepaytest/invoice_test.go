package stripepaytest_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestInvoiceTotals checks the fake's invoice totals against Stripe's
// documented rules, worked by hand: discounts come off every line (percent)
// or the invoice once (amount, never below zero); tax is computed after
// discounts, exclusive tax added, inclusive tax only stated; the customer's
// credit balance is applied up to the total and an amount owed is added:
// amount_due = max(total + starting_balance, 0). Each upgrade is Pro → Scale
// with 15 of 30 days left: a 1500 proration (1500 yen for the JPY prices).
func TestInvoiceTotals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		currency string
		coupon   stripepaytest.Coupon
		tax      stripepaytest.TaxRate
		balance  int64
		// Stripe's invoice fields.
		wantSubtotal, wantDiscount, wantTax, wantTotal, wantDue int64
		// What stripepay quotes from it (billing.Preview's parts).
		wantPreview billing.Preview
	}{
		{name: "nothing applies", currency: "usd",
			wantSubtotal: 1500, wantTotal: 1500, wantDue: 1500,
			wantPreview: billing.Preview{AmountDueNowCents: 1500, SubtotalCents: 1500}},
		// 20% of 1500 = 300; 10% tax of 1200 = 120; 1320 − 500 of credit.
		{name: "coupon, tax and credit", currency: "usd",
			coupon: stripepaytest.Coupon{PercentOff: 20}, tax: stripepaytest.TaxRate{Percentage: 10}, balance: -500,
			wantSubtotal: 1500, wantDiscount: 300, wantTax: 120, wantTotal: 1320, wantDue: 820,
			wantPreview: billing.Preview{AmountDueNowCents: 820, SubtotalCents: 1500, DiscountCents: 300, TaxCents: 120, CreditAppliedCents: 500}},
		// $5 off; 8.25% of 1000 = 82.5 → 83 (half away from zero).
		{name: "amount off and tax", currency: "usd",
			coupon: stripepaytest.Coupon{AmountOff: 500}, tax: stripepaytest.TaxRate{Percentage: 8.25},
			wantSubtotal: 1500, wantDiscount: 500, wantTax: 83, wantTotal: 1083, wantDue: 1083,
			wantPreview: billing.Preview{AmountDueNowCents: 1083, SubtotalCents: 1500, DiscountCents: 500, TaxCents: 83}},
		// $20 off a $15 invoice takes it to zero, not below.
		{name: "amount off above the subtotal", currency: "usd",
			coupon:       stripepaytest.Coupon{AmountOff: 2000},
			wantSubtotal: 1500, wantDiscount: 1500, wantTotal: 0, wantDue: 0,
			wantPreview: billing.Preview{SubtotalCents: 1500, DiscountCents: 1500}},
		// Inclusive 20%: 1500 × 20/120 = 250 of the 1500 is tax; nothing added.
		{name: "inclusive tax", currency: "usd",
			tax:          stripepaytest.TaxRate{Percentage: 20, Inclusive: true},
			wantSubtotal: 1500, wantTax: 250, wantTotal: 1500, wantDue: 1500,
			wantPreview: billing.Preview{AmountDueNowCents: 1500, SubtotalCents: 1500}},
		// More credit than the total: all of it is covered, the rest stays.
		{name: "credit above the total", currency: "usd", balance: -2000,
			wantSubtotal: 1500, wantTotal: 1500, wantDue: 0,
			wantPreview: billing.Preview{SubtotalCents: 1500, CreditAppliedCents: 1500}},
		// An amount owed is added to what is due; its parts do not explain
		// the sum, which billing refuses to state (TestAmountParts).
		{name: "amount owed", currency: "usd", balance: 300,
			wantSubtotal: 1500, wantTotal: 1500, wantDue: 1800,
			wantPreview: billing.Preview{AmountDueNowCents: 1800, SubtotalCents: 1500}},
		// Yen, zero-decimal: 12.5% of ¥1500 = 187.5 → 188; 10% tax of 1312 =
		// 131.2 → 131; 1443 − ¥1000 of credit.
		{name: "jpy", currency: "jpy",
			coupon: stripepaytest.Coupon{PercentOff: 12.5}, tax: stripepaytest.TaxRate{Percentage: 10}, balance: -1000,
			wantSubtotal: 1500, wantDiscount: 188, wantTax: 131, wantTotal: 1443, wantDue: 443,
			wantPreview: billing.Preview{AmountDueNowCents: 443, SubtotalCents: 1500, DiscountCents: 188, TaxCents: 131, CreditAppliedCents: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvIn(t, tt.currency)
			e.fake.SetCustomerDiscount(e.org.CustomerID, tt.coupon)
			e.fake.SetTaxRate(e.org.SubscriptionID, tt.tax)
			e.fake.SetCustomerBalance(e.org.CustomerID, tt.balance)

			inv, err := e.stripeAPI().Invoices.CreatePreview(&stripe.InvoiceCreatePreviewParams{
				Subscription: stripe.String(e.org.SubscriptionID),
				SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
					Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
						ID: stripe.String(e.org.ItemID), Price: stripe.String(priceScale),
					}},
					ProrationBehavior: stripe.String("always_invoice"),
					ProrationDate:     stripe.Int64(midTerm.Unix()),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var discount, tax int64
			for _, d := range inv.TotalDiscountAmounts {
				discount += d.Amount
			}
			for _, x := range inv.TotalTaxAmounts {
				tax += x.Amount
			}
			if inv.Subtotal != tt.wantSubtotal || discount != tt.wantDiscount || tax != tt.wantTax ||
				inv.Total != tt.wantTotal || inv.AmountDue != tt.wantDue || inv.StartingBalance != tt.balance ||
				string(inv.Currency) != tt.currency {
				t.Errorf("subtotal %d, discount %d, tax %d, total %d, due %d, starting balance %d %s; want %d, %d, %d, %d, %d, %d %s",
					inv.Subtotal, discount, tax, inv.Total, inv.AmountDue, inv.StartingBalance, inv.Currency,
					tt.wantSubtotal, tt.wantDiscount, tt.wantTax, tt.wantTotal, tt.wantDue, tt.balance, tt.currency)
			}

			got, err := e.p.PreviewPlanChange(context.Background(), e.change(priceScale))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantPreview
			want.ProrationCents, want.Currency = 1500, tt.currency
			if got != want {
				t.Errorf("preview %+v, want %+v", got, want)
			}
		})
	}
}

// TestInvoiceChargedUsesCredit: an update invoiced at once (always_invoice)
// uses the customer's credit; what is left stays on the balance.
func TestInvoiceChargedUsesCredit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		before, after int64
	}{
		{"partly used", -500, 0},
		{"more than the invoice", -2000, -500},
		{"none", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvIn(t, "usd")
			e.fake.SetCustomerBalance(e.org.CustomerID, tt.before)
			if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "up-"+tt.name); err != nil {
				t.Fatal(err)
			}
			if got := e.fake.CustomerBalance(e.org.CustomerID); got != tt.after {
				t.Errorf("balance after the upgrade %d, want %d", got, tt.after)
			}
		})
	}
}

// newEnvIn is newEnv with the three prices in currency.
func newEnvIn(t *testing.T, currency string) env {
	t.Helper()
	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return start })
	fake.SetPrice(priceFree, 0, currency)
	fake.SetPrice(pricePro, 1900, currency)
	fake.SetPrice(priceScale, 4900, currency)
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	p := stripepay.New(stripepay.Config{SecretKey: "sk_test_fake", APIBase: srv.URL})
	org, err := p.CreateCustomer(context.Background(), billing.NewCustomer{
		OrgID: "org_1", Name: "Vector Build", Email: "ops@vector.example", PriceID: pricePro,
	}, "org_1")
	if err != nil {
		t.Fatalf("create customer: %v", err)
	}
	return env{fake: fake, url: srv.URL, p: p, org: org}
}

package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestEveryPartOfTheAmount: with a coupon, a tax rate and account credit at
// the Stripe fake, in a catalog that is not in dollars, the first call
// states every part of the amount (details and summary, in the currency as
// people write it), the arithmetic is Stripe's (worked out here from the
// rules, not read from billingd), the receipt carries the parts the summary
// stated, and the credit is used when the change is charged (contract §6).
func TestEveryPartOfTheAmount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		currency string
		prices   [3]int64 // free, standard, premium
		money    func(int64) string
		head     string
	}{
		{"jpy", [3]int64{0, 1900, 4900}, func(n int64) string { return "¥" + grouped(n) },
			"Upgrade Parts KK from Standard (¥1,900/mo) to Premium (¥4,900/mo)."},
		{"eur", [3]int64{0, 1900, 4900}, func(n int64) string { return fmt.Sprintf("€%s.%02d", grouped(n/100), n%100) },
			"Upgrade Parts KK from Standard (€19/mo) to Premium (€49/mo)."},
	} {
		t.Run(tt.currency, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, withEnv("PLANS_FILE", plansFile(t, tt.currency, tt.prices)))
			for i, id := range []string{"free", "standard", "premium"} {
				h.fake.SetPrice("price_"+tt.currency+"_"+id, tt.prices[i], tt.currency)
			}
			acct := h.createOrg("parts", "Parts KK", "standard")
			h.fake.SetCustomerDiscount(acct.Org.StripeCustomerID, stripepaytest.Coupon{PercentOff: 15})
			h.fake.SetTaxRate(acct.Subscription.StripeSubscriptionID, stripepaytest.TaxRate{Percentage: 10})
			h.fake.SetCustomerBalance(acct.Org.StripeCustomerID, -500)

			tok := h.user("parts", "kei")
			p := h.propose(tok, "upgrade", "premium")
			d := p.Details
			// Stripe's rules: 15% off the proration, 10% tax after the
			// discount, then up to 500 of credit.
			sub := d.SubtotalCents
			discount := halfAway(float64(sub) * 0.15)
			tax := halfAway(float64(sub-discount) * 0.10)
			total := sub - discount + tax
			credit := min(int64(500), total)
			if sub <= 0 || d.DiscountCents != discount || d.TaxCents != tax || d.CreditAppliedCents != credit ||
				d.AmountDueNowCents != total-credit || d.Currency != tt.currency {
				t.Fatalf("details %+v; by Stripe's rules: discount %d, tax %d, credit %d, due %d %s",
					d, discount, tax, credit, total-credit, tt.currency)
			}
			want := fmt.Sprintf("Pro-rated to today: %s plus %s tax, less a %s discount; %s of account credit applied: %s due now;",
				tt.money(sub), tt.money(tax), tt.money(discount), tt.money(credit), tt.money(total-credit))
			if !strings.Contains(p.Summary, want) || !strings.HasPrefix(p.Summary, tt.head) {
				t.Fatalf("summary\n  %q\ndoes not say\n  %q", p.Summary, want)
			}

			r := h.confirm(tok, "upgrade", "premium", p.ConfirmToken)
			wantStatus(t, r, http.StatusOK, "")
			var done executedWithReceipt
			r.decode(t, &done)
			c, err := receipt.Verify(done.Receipt, h.receiptKeys())
			if err != nil {
				t.Fatal(err)
			}
			if q := c.Quoted; q == nil || *q != (billing.QuotedAmounts{SubtotalCents: sub, DiscountCents: discount, TaxCents: tax,
				CreditAppliedCents: credit, AmountDueNowCents: total - credit}) || c.Currency != tt.currency {
				t.Fatalf("receipt: quoted %+v %s", c.Quoted, c.Currency)
			}
			if left := h.fake.CustomerBalance(acct.Org.StripeCustomerID); left != min(total-500, 0) {
				t.Fatalf("balance after the charge %d, want %d", left, min(total-500, 0))
			}
		})
	}
}

// plansFile writes a catalog in currency (PLANS_FILE).
func plansFile(t *testing.T, currency string, prices [3]int64) string {
	t.Helper()
	var plans []map[string]any
	for i, id := range []string{"free", "standard", "premium"} {
		plans = append(plans, catalogPlan(id, prices[i], currency, "price_"+currency+"_"+id))
	}
	return writePlansFile(t, plans)
}

// catalogPlan is one plan of a PLANS_FILE.
func catalogPlan(id string, amount int64, currency, priceID string) map[string]any {
	return map[string]any{"id": id, "name": strings.ToUpper(id[:1]) + id[1:], "amount_cents": amount,
		"currency": currency, "interval": "month", "stripe_price_id": priceID}
}

// writePlansFile writes plans as a PLANS_FILE and returns its path.
func writePlansFile(t *testing.T, plans []map[string]any) string {
	t.Helper()
	data, err := json.Marshal(plans)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plans.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func grouped(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func halfAway(x float64) int64 { return int64(math.Floor(x + 0.5)) }

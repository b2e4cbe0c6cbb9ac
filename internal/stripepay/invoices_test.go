package stripepay

import (
	"context"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/testenv"
)

// TestStripeMockSubscriptionInvoices: listing a subscription's invoices is
// a request Stripe's API spec accepts, and its answer maps into invoices.
func TestStripeMockSubscriptionInvoices(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	got, err := p.SubscriptionInvoices(context.Background(), "sub_123", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].ID == "" || got[0].Currency == "" || got[0].Created.IsZero() {
		t.Fatalf("invoices %+v, want the fixture's", got)
	}
}

// TestFakeRenewalAfterUpgrade (issue 27): as at Stripe, the renewal after
// an upgrade becomes the latest invoice and carries the subscription's
// metadata naming the upgrade, with billing_reason subscription_cycle and
// no proration; the upgrade's own invoice (subscription_update, proration
// lines from the proration date) is listed after it, newest first.
func TestFakeRenewalAfterUpgrade(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	change := env.change(priceScale, true)
	change.FromPriceID, change.ConfirmationID = pricePro, "cfm_up"
	applied, err := env.p.ApplyPlanChange(context.Background(), change, "billingd-cfm_up")
	if err != nil || applied.Invoice == nil {
		t.Fatalf("apply: %+v, %v", applied, err)
	}
	env.fake.AdvanceClock(31 * 24 * time.Hour) // past the period's end: renewed
	state, err := env.p.ReadSubscription(context.Background(), env.cust.SubscriptionID)
	if err != nil {
		t.Fatal(err)
	}
	renewal := state.LatestInvoice
	if renewal == nil || renewal.ID == applied.Invoice.ID || renewal.BillingReason != "subscription_cycle" ||
		renewal.ConfirmationID != "cfm_up" || len(renewal.Prorations) != 0 || renewal.AmountDueCents != 4900 {
		t.Fatalf("latest invoice after the renewal %+v", renewal)
	}
	listed, err := env.p.SubscriptionInvoices(context.Background(), env.cust.SubscriptionID, periodStart)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].ID != renewal.ID || listed[1].ID != applied.Invoice.ID {
		t.Fatalf("listed %+v, want the renewal then the upgrade's", listed)
	}
	own := listed[1]
	if own.BillingReason != "subscription_update" || own.ConfirmationID != "cfm_up" || own.AmountDueCents != applied.Invoice.AmountDueCents ||
		len(own.Prorations) == 0 || !own.Prorations[0].Start.Equal(change.ProrationDate) {
		t.Fatalf("the upgrade's invoice %+v", own)
	}
	later, err := env.p.SubscriptionInvoices(context.Background(), env.cust.SubscriptionID, renewal.Created.Add(time.Second))
	if err != nil || len(later) != 0 {
		t.Fatalf("invoices after the renewal: %+v, %v", later, err)
	}
}

package stripepaytest_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestUpdateInvoicesAndReadsBack: an always_invoice update makes a paid
// invoice of the previewed amount (plus an adjustment a test asked for),
// named by the subscription's latest_invoice, which a read returns.
func TestUpdateInvoicesAndReadsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	quoted, err := e.p.PreviewPlanChange(context.Background(), e.change(priceScale))
	if err != nil {
		t.Fatal(err)
	}
	e.fake.AdjustNextInvoice(123)
	applied, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_inv")
	if err != nil {
		t.Fatal(err)
	}
	if applied.Invoice == nil || applied.Invoice.AmountDueCents != quoted.AmountDueNowCents+123 {
		t.Fatalf("invoice %+v, want %d", applied.Invoice, quoted.AmountDueNowCents+123)
	}
	state, err := e.p.ReadSubscription(context.Background(), e.org.SubscriptionID)
	if err != nil {
		t.Fatal(err)
	}
	if state.LatestInvoice == nil || !reflect.DeepEqual(state.LatestInvoice, applied.Invoice) || state.PriceID != priceScale ||
		state.ConfirmationID != "" || state.Items != 1 || state.Quantity != 1 {
		t.Fatalf("read back %+v", state)
	}
}

// TestDashboardChangesAndEvents: a change made in the dashboard keeps the
// metadata, does not count as billingd's update, and makes an event; so
// does every update. Events carry the subscription as it was then.
func TestDashboardChangesAndEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	change := e.change(priceScale)
	change.ConfirmationID = "cfm_1"
	if _, err := e.p.ApplyPlanChange(context.Background(), change, "conf_evt"); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.ChangeInDashboard(e.org.SubscriptionID, func(s *stripepaytest.Subscription) {
		s.Items[0].PriceID = priceFree
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.ChangeInDashboard(e.org.SubscriptionID, func(s *stripepaytest.Subscription) { s.Items[0].PriceID = "price_nope" }); err == nil {
		t.Fatal("a change to an unknown price was accepted")
	}
	state, err := e.p.ReadSubscription(context.Background(), e.org.SubscriptionID)
	if err != nil || state.PriceID != priceFree || state.ConfirmationID != "cfm_1" ||
		state.LatestInvoice == nil || state.LatestInvoice.ConfirmationID != "cfm_1" {
		t.Fatalf("after the dashboard change: %+v, %v", state, err)
	}
	if n := e.fake.UpdateCount(e.org.SubscriptionID); n != 1 {
		t.Fatalf("UpdateCount %d, want billingd's one", n)
	}
	var types, prices []string
	for _, ev := range e.fake.Events() {
		var body struct {
			Type string `json:"type"`
			Data struct {
				Object struct {
					Items struct {
						Data []struct {
							Price struct{ ID string } `json:"price"`
						} `json:"data"`
					} `json:"items"`
				} `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ev.Payload, &body); err != nil || body.Type != ev.Type {
			t.Fatalf("event %s: %v", ev.Payload, err)
		}
		types = append(types, ev.Type)
		prices = append(prices, body.Data.Object.Items.Data[0].Price.ID)
	}
	want := []string{"customer.subscription.created", "customer.subscription.updated", "customer.subscription.updated"}
	if !slices.Equal(types, want) || !slices.Equal(prices, []string{pricePro, priceScale, priceFree}) {
		t.Fatalf("events %v with prices %v", types, prices)
	}
}

// TestApplyThenServerError: the change is made but a 500 is saved for the
// key, so a retry gets the 500 again and only a read shows the change.
func TestApplyThenServerError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.FailNext(stripepaytest.ApplyThenServerError)
	for range 2 {
		_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_500")
		if !errors.Is(err, billing.ErrProviderFailed) {
			t.Fatalf("got %v, want a 500", err)
		}
	}
	e.wantUpdates(t, 1)
	if p := e.price(t); p != priceScale {
		t.Fatalf("price %s, want the change made", p)
	}
}

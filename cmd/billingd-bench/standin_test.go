package main

import (
	"context"
	"net/http/httptest"
	"time"

	"encoding/json"
	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"reflect"
	"testing"
)

// The canned stand-in's hand-appended subscription is the JSON the map it
// replaced encoded to.
func TestCannedSubscription(t *testing.T) {
	want := map[string]any{
		"id": "sub_\"1", "object": "subscription", "status": "active", "current_period_end": float64(1700000000),
		"items": map[string]any{"object": "list", "has_more": false, "data": []any{map[string]any{
			"id": "si_1", "object": "subscription_item", "quantity": float64(1), "price": map[string]any{"id": "price_x", "object": "price"},
		}}},
	}
	var got map[string]any
	if err := json.Unmarshal(cannedSubscription("sub_\"1", "si_1", "price_x", 1700000000), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// TestCannedUpgradeInvoice: an upgrade invoiced at once gets, from the
// canned stand-in, an invoice billingd takes for the change's own (its
// confirmation, billing reason and proration lines from the proration
// date), as from Stripe, so the bench measures billingd's production path
// and not its "amount invoiced unknown" warning.
func TestCannedUpgradeInvoice(t *testing.T) {
	srv := httptest.NewServer(cannedStripe(&cannedSubscriptions{}))
	defer srv.Close()
	p := stripepay.New(stripepay.Config{SecretKey: "sk_test_bench", APIBase: srv.URL})
	pro, scale := planOf("pro"), planOf("scale")
	at := time.Now().Truncate(time.Second)
	applied, err := p.ApplyPlanChange(context.Background(), billing.PlanChange{
		CustomerID: "cus_bench1", SubscriptionID: "sub_bench1", ItemID: "si_bench1", ConfirmationID: "cfm_bench",
		FromPriceID: pro.StripePriceID, NewPriceID: scale.StripePriceID, FromQuantity: 1, Quantity: 1,
		ProrationDate: at, ChargeNow: true,
	}, "billingd-cfm_bench")
	if err != nil {
		t.Fatal(err)
	}
	inv := applied.Invoice
	if inv == nil {
		t.Fatal("no invoice")
	}
	if inv.ConfirmationID != "cfm_bench" || inv.BillingReason != billing.BillingReasonUpdate || inv.AmountDueCents != 1500 ||
		inv.Created.IsZero() || len(inv.Prorations) != 2 {
		t.Fatalf("invoice %+v", inv)
	}
	for _, l := range inv.Prorations {
		if !l.Start.Equal(at) || (l.PriceID != pro.StripePriceID && l.PriceID != scale.StripePriceID) {
			t.Errorf("proration line %+v, want from %s on %s or %s", l, at, pro.StripePriceID, scale.StripePriceID)
		}
	}
}

package stripepaytest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// setSeats sets the subscription's quantity in the dashboard (no invoice).
func (e env) setSeats(t *testing.T, n int64) {
	t.Helper()
	if err := e.fake.ChangeInDashboard(e.org.SubscriptionID, func(s *stripepaytest.Subscription) { s.Items[0].Quantity = n }); err != nil {
		t.Fatal(err)
	}
}

// seatsUpdate is billingd's update for a change of seats charged or
// credited now: the item's quantity, and its price if not "".
func (e env) seatsUpdate(price string, quantity int64) *stripe.SubscriptionParams {
	item := &stripe.SubscriptionItemsParams{ID: stripe.String(e.org.ItemID)}
	if price != "" {
		item.Price = stripe.String(price)
	}
	if quantity > 0 {
		item.Quantity = stripe.Int64(quantity)
	}
	params := &stripe.SubscriptionParams{
		Items:             []*stripe.SubscriptionItemsParams{item},
		ProrationBehavior: stripe.String("always_invoice"),
		PaymentBehavior:   stripe.String("error_if_incomplete"),
		ProrationDate:     stripe.Int64(midTerm.Unix()),
	}
	params.AddExpand("latest_invoice")
	return params
}

// TestQuantityChangeInvoicedNow: a change of the item's quantity (with or
// without a new price) is prorated on quantity × unit amount and invoiced
// at once; more seats are charged, fewer credited: a negative proration
// line, nothing due, the credit on the customer's balance. A new price
// without a quantity resets it to 1, as Stripe does.
func TestQuantityChangeInvoicedNow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		seats         int64  // before
		price         string // "" keeps the price
		quantity      int64  // 0: not sent
		wantPrice     string
		wantQty       int64
		wantNet       int64 // the proration line: half the difference
		wantDue       int64
		wantBalance   int64
		wantLineCount int
	}{
		{"more seats", 1, "", 3, pricePro, 3, (3*1900 - 1900) / 2, 1900, 0, 1},
		{"fewer seats", 3, "", 1, pricePro, 1, -(3*1900 - 1900) / 2, 0, -1900, 1},
		{"price and seats", 1, priceScale, 2, priceScale, 2, (2*4900 - 1900) / 2, 3950, 0, 1},
		{"new price alone resets the seats", 3, priceScale, 0, priceScale, 1, (4900 - 3*1900) / 2, 0, -400, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, stripepay.Config{})
			e.setSeats(t, tt.seats)
			sub, err := e.stripeAPI().Subscriptions.Update(e.org.SubscriptionID, e.seatsUpdate(tt.price, tt.quantity))
			if err != nil {
				t.Fatal(err)
			}
			it := sub.Items.Data[0]
			if it.Quantity != tt.wantQty || it.Price.ID != tt.wantPrice {
				t.Errorf("item %d × %s, want %d × %s", it.Quantity, it.Price.ID, tt.wantQty, tt.wantPrice)
			}
			inv := sub.LatestInvoice
			if inv == nil || inv.Lines == nil || len(inv.Lines.Data) != tt.wantLineCount {
				t.Fatalf("latest invoice %+v", inv)
			}
			line := inv.Lines.Data[0]
			if line.Amount != tt.wantNet || !line.Proration || line.Quantity != tt.wantQty ||
				inv.Total != tt.wantNet || inv.AmountDue != tt.wantDue || inv.Status != stripe.InvoiceStatusPaid {
				t.Errorf("invoice total %d due %d %s, line %d × %d (proration %v); want %d, due %d, paid",
					inv.Total, inv.AmountDue, inv.Status, line.Quantity, line.Amount, line.Proration, tt.wantNet, tt.wantDue)
			}
			if got := e.fake.CustomerBalance(e.org.CustomerID); got != tt.wantBalance {
				t.Errorf("customer balance %d, want %d", got, tt.wantBalance)
			}
			writes := e.fake.WritesFor(e.org.SubscriptionID)
			last := writes[len(writes)-1]
			if last.Endpoint != stripepaytest.UpdateSubscription || last.Before.Quantity != tt.seats ||
				last.After.Quantity != tt.wantQty || last.Invoice != inv.ID {
				t.Errorf("write logged as %+v", last)
			}
		})
	}
}

// TestQuantityDeclinedChangesNothing: more seats whose invoice the card
// cannot pay (error_if_incomplete) are refused, and nothing changes.
func TestQuantityDeclinedChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.FailNext(stripepaytest.DeclineCard)
	_, err := e.stripeAPI().Subscriptions.Update(e.org.SubscriptionID, e.seatsUpdate("", 5))
	wantStripeError(t, err, 402, stripe.ErrorCodeCardDeclined)
	sub, _ := e.fake.Subscription(e.org.SubscriptionID)
	if sub.Items[0].Quantity != 1 || sub.LatestInvoice != "" {
		t.Errorf("after the decline: %+v", sub)
	}
	e.wantUpdates(t, 0)
	if w := e.fake.WritesFor(e.org.SubscriptionID); len(w) != 0 {
		t.Errorf("writes %+v, want none", w)
	}
}

// TestQuantityPreview: previews count quantity × unit amount, an item
// given only a quantity keeping its price.
func TestQuantityPreview(t *testing.T) {
	t.Parallel()
	type line struct {
		amount, quantity int64
		proration        bool
	}
	tests := []struct {
		name      string
		seats     int64
		quantity  int64
		behavior  string
		wantDue   int64
		wantLines []line
	}{
		// (3 − 1) × 1900 × 15/30.
		{"more seats now", 1, 3, "always_invoice", 1900, []line{{1900, 3, true}}},
		// Credit −1900 × 15/30, the rest of 1900 charged; next period 3 × 1900.
		{"more seats later", 1, 3, "create_prorations", 7600, []line{{-950, 1, true}, {2850, 3, true}, {5700, 3, false}}},
		{"fewer seats now", 3, 1, "always_invoice", 0, []line{{-1900, 1, true}}},
		{"fewer seats at the period's end", 3, 2, "none", 3800, []line{{3800, 2, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, stripepay.Config{})
			e.setSeats(t, tt.seats)
			inv, err := e.stripeAPI().Invoices.CreatePreview(&stripe.InvoiceCreatePreviewParams{
				Subscription: stripe.String(e.org.SubscriptionID),
				SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
					Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
						ID: stripe.String(e.org.ItemID), Quantity: stripe.Int64(tt.quantity),
					}},
					ProrationBehavior: stripe.String(tt.behavior),
					ProrationDate:     stripe.Int64(midTerm.Unix()),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []line
			for _, l := range inv.Lines.Data {
				got = append(got, line{l.Amount, l.Quantity, l.Proration})
			}
			if inv.AmountDue != tt.wantDue || !slices.Equal(got, tt.wantLines) {
				t.Errorf("amount_due %d, lines %v; want %d, %v", inv.AmountDue, got, tt.wantDue, tt.wantLines)
			}
			if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Items[0].Quantity != tt.seats {
				t.Errorf("a preview changed the quantity to %d", sub.Items[0].Quantity)
			}
		})
	}
}

// TestScheduleKeepsQuantity: a schedule made from a subscription keeps
// its quantity in the phase, a later phase's quantity applies at its
// start, and the write log shows the change scheduled.
func TestScheduleKeepsQuantity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.setSeats(t, 3)
	sch := e.fromSubscription(t)
	if q := sch.Phases[0].Items[0].Quantity; q != 3 {
		t.Fatalf("phase quantity %d, want the subscription's 3", q)
	}
	params := &stripe.SubscriptionScheduleParams{
		Phases: []*stripe.SubscriptionSchedulePhaseParams{
			{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(pricePro), Quantity: stripe.Int64(3)}},
				StartDate: stripe.Int64(start.Unix()), EndDate: stripe.Int64(periodEnd.Unix())},
			{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(pricePro), Quantity: stripe.Int64(2)}},
				Iterations: stripe.Int64(1)},
		},
		ProrationBehavior: stripe.String("none"),
	}
	updated, err := e.stripeAPI().SubscriptionSchedules.Update(sch.ID, params)
	if err != nil {
		t.Fatal(err)
	}
	if q := updated.Phases[1].Items[0].Quantity; q != 2 {
		t.Fatalf("next phase quantity %d, want 2", q)
	}
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Items[0].Quantity != 3 {
		t.Fatalf("the update changed the quantity now: %+v", sub.Items)
	}
	writes := e.fake.WritesFor(e.org.SubscriptionID)
	if w := writes[len(writes)-1]; w.After.Scheduled != pricePro+"×2@"+periodEnd.Format(time.RFC3339) {
		t.Errorf("scheduled %q", w.After.Scheduled)
	}
	e.fake.AdvanceClock(30 * 24 * time.Hour)
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Items[0].Quantity != 2 || sub.Items[0].ID != e.org.ItemID {
		t.Errorf("after the phase began: %+v", sub.Items)
	}
}

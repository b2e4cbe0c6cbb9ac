package stripepaytest_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// atPeriodEnd is billingd's update cancelling (true) or resuming (false)
// at the period's end.
func atPeriodEnd(cancel bool) *stripe.SubscriptionParams {
	params := &stripe.SubscriptionParams{CancelAtPeriodEnd: stripe.Bool(cancel)}
	if cancel {
		params.CancellationDetails = &stripe.SubscriptionCancellationDetailsParams{Feedback: stripe.String("too_expensive")}
	}
	return params
}

// lastEvent decodes the data.object of the latest event of kind.
func (e env) lastEvent(t *testing.T, kind string) stripe.Subscription {
	t.Helper()
	events := e.fake.Events()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != kind {
			continue
		}
		var ev struct {
			Data struct {
				Object stripe.Subscription `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(events[i].Payload, &ev); err != nil {
			t.Fatalf("event %s: %v", events[i].Payload, err)
		}
		return ev.Data.Object
	}
	t.Fatalf("no %s event among %v", kind, e.eventTypes())
	return stripe.Subscription{}
}

// wantInvalidRequest checks a 400 invalid_request_error whose message
// holds message.
func wantInvalidRequest(t *testing.T, err error, message string) {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeInvalidRequest ||
		!strings.Contains(se.Msg, message) {
		t.Errorf("got %v, want 400 invalid_request_error %q", err, message)
	}
}

// TestCancelAtPeriodEndAndResume: cancelling at the period's end keeps the
// subscription active with cancel_at its period's end and canceled_at
// the request's time; resuming clears both. Neither invoices anything.
// The write log and the events show each step.
func TestCancelAtPeriodEndAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	e.fake.SetClock(func() time.Time { return midTerm })
	sub, err := api.Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(true))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Status != stripe.SubscriptionStatusActive || !sub.CancelAtPeriodEnd || sub.CancelAt != periodEnd.Unix() ||
		sub.CanceledAt != midTerm.Unix() || sub.EndedAt != 0 || sub.LatestInvoice != nil ||
		sub.CancellationDetails == nil || sub.CancellationDetails.Reason != "cancellation_requested" ||
		sub.CancellationDetails.Feedback != stripe.SubscriptionCancellationDetailsFeedbackTooExpensive {
		t.Fatalf("cancelled at the period's end: %+v, details %+v", sub, sub.CancellationDetails)
	}
	if ev := e.lastEvent(t, "customer.subscription.updated"); !ev.CancelAtPeriodEnd || ev.CancelAt != periodEnd.Unix() ||
		ev.CanceledAt != midTerm.Unix() || ev.Status != stripe.SubscriptionStatusActive || ev.Items.Data[0].Quantity != 1 {
		t.Errorf("event %+v", ev)
	}

	sub, err = api.Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(false))
	if err != nil {
		t.Fatal(err)
	}
	if sub.CancelAtPeriodEnd || sub.CancelAt != 0 || sub.CanceledAt != 0 || sub.CancellationDetails.Reason != "" {
		t.Fatalf("resumed: %+v, details %+v", sub, sub.CancellationDetails)
	}
	writes := e.fake.WritesFor(e.org.SubscriptionID)
	if len(writes) != 2 || !writes[0].After.CancelAtPeriodEnd || writes[0].Before.CancelAtPeriodEnd ||
		writes[1].After.CancelAtPeriodEnd || writes[1].After.Status != "active" || writes[0].Invoice != "" {
		t.Errorf("writes %+v", writes)
	}
	e.wantUpdates(t, 2)
}

// TestCancelAtPeriodEndRefusedWhileScheduled: a subscription a schedule
// manages refuses a change of its cancellation, with Stripe's error;
// released from the schedule, it can be cancelled at the period's end.
func TestCancelAtPeriodEndRefusedWhileScheduled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	sch := e.fromSubscription(t)
	if _, err := api.SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceFree)); err != nil {
		t.Fatal(err)
	}
	for _, cancel := range []bool{true, false} {
		_, err := api.Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(cancel))
		wantInvalidRequest(t, err, "The subscription is managed by the subscription schedule `"+sch.ID+
			"`, and updating any cancelation behavior directly is not allowed. Please update the schedule instead.")
	}
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.CancelAtPeriodEnd || sub.Schedule != sch.ID {
		t.Fatalf("after the refusals: %+v", sub)
	}
	e.wantUpdates(t, 0)

	if _, err := api.SubscriptionSchedules.Release(sch.ID, nil); err != nil {
		t.Fatal(err)
	}
	sub, err := api.Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(true))
	if err != nil || !sub.CancelAtPeriodEnd || sub.Schedule != nil || sub.Items.Data[0].Price.ID != pricePro {
		t.Fatalf("after the release: %+v, %v", sub, err)
	}
}

// TestRenewalEndsCancelAtPeriodEnd: at the period's end a subscription
// set to cancel there ends instead of renewing: status canceled, ended_at
// the period's end, no renewal invoice, customer.subscription.deleted.
func TestRenewalEndsCancelAtPeriodEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		renew func(e env)
	}{
		{"AdvanceClock", func(e env) { e.fake.AdvanceClock(31 * 24 * time.Hour) }},
		{"RenewNow", func(e env) { e.fake.RenewNow(e.org.SubscriptionID) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, stripepay.Config{})
			if _, err := e.stripeAPI().Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(true)); err != nil {
				t.Fatal(err)
			}
			tt.renew(e)
			sub, _ := e.fake.Subscription(e.org.SubscriptionID)
			if sub.Status != "canceled" || sub.EndedAt.IsZero() || !sub.EndedAt.Equal(sub.CurrentPeriodEnd) ||
				!sub.CanceledAt.Equal(start) || sub.LatestInvoice != "" {
				t.Fatalf("after the period's end: %+v", sub)
			}
			ev := e.lastEvent(t, "customer.subscription.deleted")
			if ev.Status != stripe.SubscriptionStatusCanceled || ev.EndedAt != sub.EndedAt.Unix() || !ev.CancelAtPeriodEnd {
				t.Errorf("deleted event %+v", ev)
			}
			writes := e.fake.WritesFor(e.org.SubscriptionID)
			if w := writes[len(writes)-1]; w.Endpoint != stripepaytest.Renewal || w.Before.Status != "active" ||
				w.After.Status != "canceled" || w.Invoice != "" {
				t.Errorf("renewal logged as %+v", w)
			}
		})
	}
}

// TestCancelNowProrated: DELETE with prorate and invoice_now ends the
// subscription now and credits the unused time of every seat on a final
// invoice, its negative total going to the customer's balance (credit,
// not a refund). The cancelled subscription then refuses updates but its
// metadata, and a second DELETE answers 404, as Stripe does.
func TestCancelNowProrated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	e.setSeats(t, 2)
	e.fake.SetClock(func() time.Time { return midTerm })
	params := &stripe.SubscriptionCancelParams{Prorate: stripe.Bool(true), InvoiceNow: stripe.Bool(true),
		CancellationDetails: &stripe.SubscriptionCancelCancellationDetailsParams{
			Feedback: stripe.String("unused"), Comment: stripe.String("the team moved on")}}
	params.AddExpand("latest_invoice")
	sub, err := api.Subscriptions.Cancel(e.org.SubscriptionID, params)
	if err != nil {
		t.Fatal(err)
	}
	d := sub.CancellationDetails
	if sub.Status != stripe.SubscriptionStatusCanceled || sub.CanceledAt != midTerm.Unix() || sub.EndedAt != midTerm.Unix() ||
		d == nil || d.Reason != "cancellation_requested" || d.Feedback != "unused" || d.Comment != "the team moved on" {
		t.Fatalf("cancelled: %+v, details %+v", sub, d)
	}
	inv := sub.LatestInvoice
	// 2 × 1900 × 15/30 unused.
	if inv == nil || inv.Total != -1900 || inv.AmountDue != 0 || inv.Status != stripe.InvoiceStatusPaid ||
		len(inv.Lines.Data) != 1 || inv.Lines.Data[0].Amount != -1900 || !inv.Lines.Data[0].Proration || inv.Lines.Data[0].Quantity != 2 {
		t.Fatalf("final invoice %+v", inv)
	}
	if b := e.fake.CustomerBalance(e.org.CustomerID); b != -1900 {
		t.Errorf("customer balance %d, want the credit -1900", b)
	}
	if ev := e.lastEvent(t, "customer.subscription.deleted"); ev.Status != stripe.SubscriptionStatusCanceled ||
		ev.CanceledAt != midTerm.Unix() || ev.Items.Data[0].Quantity != 2 {
		t.Errorf("deleted event %+v", ev)
	}
	writes := e.fake.WritesFor(e.org.SubscriptionID)
	if w := writes[len(writes)-1]; w.Endpoint != stripepaytest.CancelSubscription || w.Before.Status != "active" ||
		w.After.Status != "canceled" || w.Invoice != inv.ID || !w.Answered {
		t.Errorf("cancellation logged as %+v", w)
	}

	_, err = api.Subscriptions.Update(e.org.SubscriptionID, &stripe.SubscriptionParams{
		Items: []*stripe.SubscriptionItemsParams{{ID: stripe.String(e.org.ItemID), Quantity: stripe.Int64(3)}}})
	wantInvalidRequest(t, err, "A canceled subscription can only update its cancellation_details and metadata.")
	_, err = api.Subscriptions.Update(e.org.SubscriptionID, atPeriodEnd(false))
	wantInvalidRequest(t, err, "A canceled subscription can only update its cancellation_details and metadata.")
	meta := &stripe.SubscriptionParams{}
	meta.AddMetadata("note", "gone")
	if _, err := api.Subscriptions.Update(e.org.SubscriptionID, meta); err != nil {
		t.Errorf("metadata of a canceled subscription: %v", err)
	}
	_, err = api.Subscriptions.Cancel(e.org.SubscriptionID, nil)
	wantStripeError(t, err, 404, stripe.ErrorCodeResourceMissing)
	if got, _ := e.fake.Subscription(e.org.SubscriptionID); got.Items[0].Quantity != 2 || got.Status != "canceled" {
		t.Errorf("after the refusals: %+v", got)
	}
}

// TestCancelNowWithoutProration: without prorate nothing is invoiced or
// credited; without invoice_now the credit would wait as a pending item,
// which the fake does not keep.
func TestCancelNowWithoutProration(t *testing.T) {
	t.Parallel()
	for _, params := range []*stripe.SubscriptionCancelParams{
		nil,
		{Prorate: stripe.Bool(true), InvoiceNow: stripe.Bool(false)},
	} {
		e := newEnv(t, stripepay.Config{})
		sub, err := e.stripeAPI().Subscriptions.Cancel(e.org.SubscriptionID, params)
		if err != nil {
			t.Fatal(err)
		}
		if sub.Status != stripe.SubscriptionStatusCanceled || sub.LatestInvoice != nil || e.fake.CustomerBalance(e.org.CustomerID) != 0 {
			t.Errorf("%+v: %+v", params, sub)
		}
	}
}

// TestCancelNowCancelsSchedule: cancelling a subscription a schedule
// manages cancels the schedule with it, and its scheduled change never
// happens.
func TestCancelNowCancelsSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	sch := e.fromSubscription(t)
	if _, err := api.SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceFree)); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Subscriptions.Cancel(e.org.SubscriptionID, nil); err != nil {
		t.Fatal(err)
	}
	got, err := api.SubscriptionSchedules.Get(sch.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != stripe.SubscriptionScheduleStatusCanceled || got.CanceledAt != start.Unix() {
		t.Errorf("schedule %s canceled_at %d", got.Status, got.CanceledAt)
	}
	e.fake.AdvanceClock(31 * 24 * time.Hour)
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Status != "canceled" || sub.Schedule != "" ||
		sub.Items[0].PriceID != pricePro {
		t.Errorf("subscription %+v", sub)
	}
	types := e.eventTypes()
	if !strings.Contains(strings.Join(types, " "), "subscription_schedule.canceled customer.subscription.deleted") {
		t.Errorf("events %v", types)
	}
}

// TestCancellationParamsChecked: feedback must be one of Stripe's values
// and booleans must be booleans; nothing is cancelled then.
func TestCancellationParamsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	_, err := api.Subscriptions.Cancel(e.org.SubscriptionID, &stripe.SubscriptionCancelParams{
		CancellationDetails: &stripe.SubscriptionCancelCancellationDetailsParams{Feedback: stripe.String("bored")}})
	wantStripeError(t, err, 400, "parameter_invalid") // the fake's code for a value out of range
	path := "/v1/subscriptions/" + e.org.SubscriptionID
	if resp, body := e.post(t, path, "", map[string][]string{"cancel_at_period_end": {"yes"}}); resp.StatusCode != 400 {
		t.Errorf("cancel_at_period_end=yes: %d %s", resp.StatusCode, body)
	}
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Status != "active" || sub.CancelAtPeriodEnd {
		t.Errorf("after the refusals: %+v", sub)
	}
}

// TestDashboardQuantityAndCancellation: the dashboard may change the
// seats and the cancellation; the fake dates a cancellation as Stripe
// does, logs it, and sends it in the events.
func TestDashboardQuantityAndCancellation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	if err := e.fake.ChangeInDashboard(e.org.SubscriptionID, func(s *stripepaytest.Subscription) {
		s.Items[0].Quantity, s.CancelAtPeriodEnd = 4, true
	}); err != nil {
		t.Fatal(err)
	}
	sub, _ := e.fake.Subscription(e.org.SubscriptionID)
	if !sub.CancelAt.Equal(periodEnd) || !sub.CanceledAt.Equal(start) || sub.CancellationDetails.Reason != "cancellation_requested" {
		t.Fatalf("after the dashboard's cancellation: %+v", sub)
	}
	if ev := e.lastEvent(t, "customer.subscription.updated"); ev.Items.Data[0].Quantity != 4 || !ev.CancelAtPeriodEnd ||
		ev.CancelAt != periodEnd.Unix() {
		t.Errorf("updated event %+v", ev)
	}
	if err := e.fake.ChangeInDashboard(e.org.SubscriptionID, func(s *stripepaytest.Subscription) { s.Status = "canceled" }); err != nil {
		t.Fatal(err)
	}
	sub, _ = e.fake.Subscription(e.org.SubscriptionID)
	if sub.Status != "canceled" || !sub.EndedAt.Equal(start) {
		t.Fatalf("after the dashboard ended it: %+v", sub)
	}
	if ev := e.lastEvent(t, "customer.subscription.deleted"); ev.Status != stripe.SubscriptionStatusCanceled || ev.EndedAt != start.Unix() {
		t.Errorf("deleted event %+v", ev)
	}
	writes := e.fake.WritesFor(e.org.SubscriptionID)
	want := []stripepaytest.SubState{
		{PriceID: pricePro, Quantity: 1, Status: "active"},
		{PriceID: pricePro, Quantity: 4, Status: "active", CancelAtPeriodEnd: true},
		{PriceID: pricePro, Quantity: 4, Status: "canceled", CancelAtPeriodEnd: true},
	}
	if len(writes) != 2 || writes[0].Before != want[0] || writes[0].After != want[1] || writes[1].After != want[2] {
		t.Errorf("writes %+v", writes)
	}
}

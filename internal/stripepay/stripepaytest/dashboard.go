package stripepaytest

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// What the fake does besides answering billingd: the invoices its updates
// make, changes made "in Stripe's dashboard" (by anyone but billingd), and
// the events Stripe would send about all of them.

// invoiceChange makes and keeps the invoice an always_invoice update of sub
// creates and charges at once: the previewed proration invoice (see
// previewInvoice), paid, plus an adjustment a test asked for
// (AdjustNextInvoice). Callers hold s.mu.
func (s *Server) invoiceChange(sub *Subscription, changes []itemChange, at time.Time) {
	inv := s.previewInvoice(sub, changes, "always_invoice", at)
	inv.ID = s.newID("in")
	inv.Total += s.invoiceAdjustment
	inv.AmountDue = max(inv.Total+inv.StartingBalance, 0) // the customer's credit applied (invoice.go)
	s.invoiceAdjustment = 0
	s.keepPaid(sub, inv)
}

// keepPaid keeps inv, made and paid at once, as sub's latest invoice: the
// customer's balance settled (chargeInvoice), nothing left to pay; a
// negative total is credited to the balance. Callers hold s.mu.
func (s *Server) keepPaid(sub *Subscription, inv invoiceJSON) {
	inv.Status = "paid"
	s.chargeInvoice(sub, inv)
	inv.AmountRemaining = 0
	s.invoices[inv.ID] = inv
	sub.LatestInvoice = inv.ID
}

// AdjustNextInvoice adds cents to the next invoice an update makes, and to
// no preview: what a tax rate or a discount that changed between a quote
// and its execution does to the amount charged.
func (s *Server) AdjustNextInvoice(cents int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invoiceAdjustment = cents
}

// Invoice returns the amount due and currency of an invoice the fake made.
func (s *Server) Invoice(id string) (amountDue int64, currency string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, ok := s.invoices[id]
	return inv.AmountDue, inv.Currency, ok
}

// ChangeInDashboard changes a subscription the way a person in Stripe's
// dashboard (or another integration) would: edit may change the status,
// the period, the items' prices and quantities, and the cancellation;
// metadata it leaves alone stays, as Stripe keeps it. A cancellation is
// completed as Stripe would (dashboardCancellation): setting
// CancelAtPeriodEnd dates it, clearing it resumes, Status "canceled" ends
// the subscription now. The change does not count in UpdateCount (which
// counts billingd's updates), and makes a customer.subscription.updated
// event (deleted when the status is canceled).
func (s *Server) ChangeInDashboard(subscriptionID string, edit func(*Subscription)) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subscriptionID]
	if !ok {
		return fmt.Errorf("no subscription %s", subscriptionID)
	}
	edited := sub.clone()
	edit(&edited)
	for _, it := range edited.Items {
		if _, ok := s.prices[it.PriceID]; !ok {
			return fmt.Errorf("no price %s", it.PriceID)
		}
	}
	pending := s.beginWrite(Dashboard, subscriptionID, "", time.Now())
	defer s.endWrite(pending, true)
	now := s.now().Truncate(time.Second)
	ending := dashboardCancellation(sub, &edited, now)
	*sub = edited
	switch {
	case ending:
		s.end(sub, now, now) // emits customer.subscription.deleted (cancel.go)
	case sub.Status == "canceled":
		s.emit("customer.subscription.deleted", sub)
	default:
		s.emit("customer.subscription.updated", sub)
	}
	return nil
}

// dashboardCancellation completes the cancellation an edit of sub made, as
// Stripe's dashboard does (cancel.go): a cancellation at the period's end
// set gets cancel_at, canceled_at and its reason where the edit left them
// unset; one cleared is resumed; a status set to canceled is reported as
// ending (the caller ends the subscription). Callers hold s.mu.
func dashboardCancellation(sub, edited *Subscription, now time.Time) (ending bool) {
	if edited.Status == "canceled" && sub.Status != "canceled" {
		edited.Status = sub.Status
		return true
	}
	switch {
	case edited.CancelAtPeriodEnd && !sub.CancelAtPeriodEnd:
		if edited.CancelAt.IsZero() {
			edited.CancelAt = edited.CurrentPeriodEnd
		}
		if edited.CanceledAt.IsZero() {
			edited.CanceledAt = now
		}
		if edited.CancellationDetails.Reason == "" {
			edited.CancellationDetails.Reason = "cancellation_requested"
		}
	case !edited.CancelAtPeriodEnd && sub.CancelAtPeriodEnd:
		edited.applyCancelUpdate(cancelUpdate{setsAtPeriodEnd: true}, now)
	}
	return false
}

// Touch makes the customer.subscription.updated event Stripe sends about
// a subscription for a change billingd does not watch (a payment method,
// an invoice setting): the subscription as it is now, changed in nothing
// billingd reads.
func (s *Server) Touch(subscriptionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subscriptionID]
	if ok {
		s.emit("customer.subscription.updated", sub)
	}
	return ok
}

// Event is a webhook event the fake made: what Stripe would POST to an
// endpoint, unsigned. Created has whole seconds, as Stripe's does, so events
// of one second cannot be ordered by it.
type Event struct {
	ID      string
	Type    string
	Created time.Time
	// Payload is the event's JSON (id, type, created, data.object).
	Payload []byte
}

// Events returns the events made so far, oldest first. A test delivers
// them as Stripe does: late, twice, in any order.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// emit records an event about sub as it is now. Callers hold s.mu.
func (s *Server) emit(kind string, sub *Subscription) {
	s.emitObject(kind, s.toSubscriptionJSON(sub, nil))
}

// emitObject records an event whose data.object is object (a subscription,
// a subscription schedule, an invoice). Callers hold s.mu.
func (s *Server) emitObject(kind string, object any) {
	id := s.newID("evt")
	created := s.now().Truncate(time.Second)
	payload, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": kind, "created": created.Unix(), "api_version": "2024-06-20",
		"livemode": false, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err) // the fake's own types always marshal
	}
	s.events = append(s.events, Event{ID: id, Type: kind, Created: created, Payload: payload})
}

package stripepaytest

import (
	"maps"
	"slices"
	"strconv"
	"time"
)

// Stripe's own writes as time passes, as a test clock makes them:
// renewals, a schedule's next phase, the end of a subscription set to
// cancel at its period's end.

// AdvanceClock moves the fake's time forward by d, as a Stripe test clock
// does, and renews every active subscription whose period ends by then,
// one period after the other: a schedule's next phase starts at the
// boundary (its items replace the subscription's, nothing prorated) or,
// after its last phase, the schedule ends as its end_behavior says; the
// new period runs 30 days from the old end; its invoice (billing_reason
// subscription_cycle, the new period at the items' prices, through the
// coupon, tax and balance rules of invoice.go) becomes the latest invoice,
// paid at once from the customer's balance or card. A subscription set to
// cancel at its period's end ends there instead (cancel.go). Events:
// subscription_schedule.updated (.released or .completed when it ends),
// customer.subscription.updated (.deleted when it ends), invoice.created.
// Subscriptions renew only
// here: the fake's clock (SetClock) alone renews nothing, as a test
// clock's subscriptions wait for the clock to be advanced.
func (s *Server) AdvanceClock(d time.Duration) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
	now := s.now()
	ids := slices.SortedFunc(maps.Keys(s.subs), compareIDs)
	for _, id := range ids {
		sub := s.subs[id]
		for sub.Status == "active" && !sub.CurrentPeriodEnd.After(now) {
			s.renew(sub)
		}
	}
}

// renew moves sub into its next period, or ends it if it was set to cancel
// at the period's end: a write of Stripe's own (made.go).
// Callers hold s.writeMu and s.mu.
func (s *Server) renew(sub *Subscription) {
	pending := s.beginWrite(Renewal, sub.ID, "", time.Now())
	defer s.endWrite(pending, true)
	if sub.CancelAtPeriodEnd {
		s.endAtPeriodEnd(sub) // cancel.go
		return
	}
	boundary := sub.CurrentPeriodEnd
	if sch, ok := s.schedules[sub.Schedule]; ok && sch.Status == "active" {
		s.advanceSchedule(sch, sub, boundary)
	}
	if sub.Status != "active" {
		return
	}
	previousStart := sub.CurrentPeriodStart
	sub.CurrentPeriodStart, sub.CurrentPeriodEnd = boundary, boundary.Add(period)
	s.invoiceRenewal(sub, previousStart)
	s.emit("customer.subscription.updated", sub)
}

// advanceSchedule moves sch past boundary, the end of sub's period: into
// the next phase if the current one ends there, or to its end. Callers
// hold s.mu.
func (s *Server) advanceSchedule(sch *Schedule, sub *Subscription, boundary time.Time) {
	if sch.Phases[sch.Current].End.After(boundary) {
		return // the phase goes on
	}
	if sch.Current+1 < len(sch.Phases) {
		sch.Current++
		s.setItems(sub, sch.Phases[sch.Current].Items)
		s.emitObject("subscription_schedule.updated", s.toScheduleJSON(sch, nil))
		return
	}
	if sch.EndBehavior == "cancel" {
		sch.Status, sch.CompletedAt = "completed", boundary
		s.end(sub, boundary, boundary) // cancel.go
		s.emitObject("subscription_schedule.completed", s.toScheduleJSON(sch, nil))
		return
	}
	s.release(sch, boundary)
}

// invoiceRenewal makes, keeps and pays the invoice of sub's new period,
// which follows the period that started at previousStart. Callers hold
// s.mu.
func (s *Server) invoiceRenewal(sub *Subscription, previousStart time.Time) {
	var lines []lineJSON
	for _, it := range sub.Items {
		pr := s.prices[it.PriceID]
		lines = append(lines, s.line(sub, pr, it.Quantity, pr.unitAmount*it.Quantity, false,
			strconv.FormatInt(it.Quantity, 10)+" × "+pr.id, sub.CurrentPeriodStart, sub.CurrentPeriodEnd))
	}
	inv := invoiceJSON{
		ID: s.newID("in"), Object: "invoice", Status: "paid", BillingReason: "subscription_cycle",
		Customer: sub.Customer, Subscription: sub.ID, Currency: s.currency(sub),
		Created: sub.CurrentPeriodStart.Unix(),
		// Stripe's period_start and period_end look back one period.
		PeriodStart: previousStart.Unix(), PeriodEnd: sub.CurrentPeriodStart.Unix(),
		Lines:               newList("/v1/invoices/lines", lines),
		SubscriptionDetails: &subscriptionDetailsJSON{Metadata: orEmpty(sub.Metadata)},
	}
	s.applyTotals(sub, &inv)
	s.chargeInvoice(sub, inv)
	inv.AmountRemaining = 0
	s.invoices[inv.ID] = inv
	sub.LatestInvoice = inv.ID
	s.emitObject("invoice.created", inv)
}

// RenewNow brings the subscription's renewal to now, as if its period had
// been due to end this instant: the subscription's period and its
// schedule's phases move back by what was left of the period, then it
// renews (and a scheduled change applies) as AdvanceClock renews it. Other
// subscriptions, and the fake's clock, stay as they are: a test renews one
// subscription without moving Stripe's time away from the database's.
func (s *Server) RenewNow(subscriptionID string) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subscriptionID]
	if !ok || sub.Status != "active" {
		return
	}
	left := sub.CurrentPeriodEnd.Sub(s.now())
	sub.CurrentPeriodStart, sub.CurrentPeriodEnd = sub.CurrentPeriodStart.Add(-left), sub.CurrentPeriodEnd.Add(-left)
	if sch, ok := s.schedules[sub.Schedule]; ok {
		for i := range sch.Phases {
			sch.Phases[i].Start = sch.Phases[i].Start.Add(-left)
			if !sch.Phases[i].End.IsZero() {
				sch.Phases[i].End = sch.Phases[i].End.Add(-left)
			}
		}
	}
	s.renew(sub)
}

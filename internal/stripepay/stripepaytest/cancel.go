package stripepaytest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Cancelling and resuming a subscription, as Stripe's API reference
// ("Update a subscription": cancel_at_period_end; "Cancel a subscription":
// DELETE /v1/subscriptions/{id}; the subscription object's cancel_at,
// canceled_at, ended_at, cancellation_details) and stripe-go v79's types
// describe it:
//
//   - cancel_at_period_end=true on an update keeps the subscription active
//     until its period ends: cancel_at is current_period_end, canceled_at
//     the time of the request (of the latest such request), and
//     cancellation_details.reason cancellation_requested. Nothing is
//     prorated, charged or credited. false resumes it: cancel_at,
//     canceled_at and the details are cleared.
//   - At the period's end (AdvanceClock, RenewNow) such a subscription
//     ends instead of renewing: status canceled, ended_at the period's
//     end, no invoice; cancel_at_period_end stays true ("did cancel at the
//     end of the period").
//   - A subscription with a schedule attached refuses any change of its
//     cancellation behaviour (400 invalid_request_error, "The subscription
//     is managed by the subscription schedule `sub_sched_…`, and updating
//     any cancelation behavior directly is not allowed. Please update the
//     schedule instead."): the schedule must be released first (or be
//     given end_behavior cancel).
//   - DELETE cancels at once: status canceled, canceled_at and ended_at
//     now, cancellation_details.reason cancellation_requested with the
//     feedback and comment given. prorate (default false) credits the
//     unused time of every item (quantity × unit amount × the share of the
//     period left); with invoice_now (default true) the credit is a
//     negative proration line on a final invoice made at once, whose
//     negative total goes to the customer's balance: credit, never a
//     refund. (prorate without invoice_now would leave the credit as a
//     pending invoice item for an invoice that never comes; the fake keeps
//     nothing then.) A schedule attached to the subscription is canceled
//     with it (status canceled, subscription_schedule.canceled).
//   - A canceled subscription is final: an update may only change its
//     metadata and cancellation_details (else 400 "A canceled subscription
//     can only update its cancellation_details and metadata."), and
//     cancelling it again answers 404 resource_missing "No such
//     subscription", as Stripe does (stripe-go issue #1887). Stripe
//     ignores Idempotency-Key on DELETE, and so does the fake: a retried
//     cancellation gets that 404, not a replay.

// feedbacks are the values of Stripe's cancellation_details[feedback].
var feedbacks = []string{"customer_service", "low_quality", "missing_features", "other",
	"switched_service", "too_complex", "too_expensive", "unused"}

// cancelUpdate is what an update asks of the cancellation.
type cancelUpdate struct {
	atPeriodEnd, setsAtPeriodEnd bool
	details                      CancellationDetails
	setsDetails                  bool
}

// parseCancelUpdate reads cancel_at_period_end and cancellation_details of
// an update.
func parseCancelUpdate(form url.Values) (cancelUpdate, error) {
	var cu cancelUpdate
	var err error
	if cu.atPeriodEnd, cu.setsAtPeriodEnd, err = boolParam(form, "cancel_at_period_end", false); err != nil {
		return cu, err
	}
	cu.details, cu.setsDetails, err = parseCancellationDetails(form)
	return cu, err
}

// parseCancellationDetails reads cancellation_details[feedback|comment].
func parseCancellationDetails(form url.Values) (d CancellationDetails, set bool, err error) {
	for name, value := range hashParams(form, "cancellation_details") {
		switch name {
		case "feedback":
			if value != "" && !slices.Contains(feedbacks, value) {
				return d, false, errParamInvalid("cancellation_details[feedback]",
					"Invalid cancellation_details[feedback]: must be one of %s", strings.Join(feedbacks, ", "))
			}
			d.Feedback = value
		case "comment":
			d.Comment = value
		default:
			return d, false, errParamInvalid("cancellation_details["+name+"]", "Received unknown parameter: cancellation_details[%s]", name)
		}
		set = true
	}
	return d, set, nil
}

// checkUpdateAllowed refuses an update Stripe would refuse for the
// subscription's state: any but metadata and cancellation_details once
// canceled, a change of the cancellation while a schedule manages it.
// Found while executing, so the answer is saved under the key.
func checkUpdateAllowed(sub *Subscription, form url.Values, cu cancelUpdate) error {
	if sub.Status == "canceled" {
		for key := range form {
			if !strings.HasPrefix(key, "metadata[") && !strings.HasPrefix(key, "cancellation_details[") && !strings.HasPrefix(key, "expand") {
				return errState("", "A canceled subscription can only update its cancellation_details and metadata.")
			}
		}
	}
	if cu.setsAtPeriodEnd && sub.Schedule != "" {
		return errState("", "The subscription is managed by the subscription schedule `%s`, and updating any "+
			"cancelation behavior directly is not allowed. Please update the schedule instead.", sub.Schedule)
	}
	return nil
}

// applyCancelUpdate sets or clears the cancellation at the period's end,
// and the details given, at now.
func (sub *Subscription) applyCancelUpdate(cu cancelUpdate, now time.Time) {
	if cu.setsAtPeriodEnd && cu.atPeriodEnd {
		sub.CancelAtPeriodEnd, sub.CancelAt, sub.CanceledAt = true, sub.CurrentPeriodEnd, now
		sub.CancellationDetails.Reason = "cancellation_requested"
	}
	if cu.setsAtPeriodEnd && !cu.atPeriodEnd && sub.Status != "canceled" {
		sub.CancelAtPeriodEnd, sub.CancelAt, sub.CanceledAt = false, time.Time{}, time.Time{}
		sub.CancellationDetails = CancellationDetails{}
	}
	if cu.setsDetails {
		sub.CancellationDetails.Feedback, sub.CancellationDetails.Comment = cu.details.Feedback, cu.details.Comment
	}
}

// cancelSubscription: DELETE /v1/subscriptions/{id} (prorate, invoice_now,
// cancellation_details[feedback|comment]).
func (s *Server) cancelSubscription(r *http.Request) (any, error) {
	f := r.PostForm
	prorate, _, err := boolParam(f, "prorate", false)
	if err != nil {
		return nil, err
	}
	invoiceNow, _, err := boolParam(f, "invoice_now", true)
	if err != nil {
		return nil, err
	}
	details, _, err := parseCancellationDetails(f)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sub, ok := s.subs[id]
	if !ok || sub.Status == "canceled" { // a canceled subscription is gone for DELETE
		return nil, errNoSuch(http.StatusNotFound, "id", "subscription", id)
	}
	now := s.now().Truncate(time.Second)
	if prorate && invoiceNow {
		s.invoiceCancellation(sub, now)
	}
	details.Reason = "cancellation_requested"
	sub.CancellationDetails = details
	s.end(sub, now, now)
	return s.toSubscriptionJSON(sub, r), nil
}

// invoiceCancellation makes the final invoice of a subscription cancelled
// at, prorated: per item, a credit for the unused time, rounded as
// prorate does; its negative total goes to the customer's balance.
// Callers hold s.mu.
func (s *Server) invoiceCancellation(sub *Subscription, at time.Time) {
	inv := s.cancellationInvoice(sub, at)
	inv.ID = s.newID("in")
	s.applyTotals(sub, &inv)
	s.keepPaid(sub, inv)
}

// previewCancellation is the invoice create_preview shows for cancelling
// sub now (subscription_details[cancel_now]) at at: the final invoice's
// credit for the unused time with create_prorations (the default), nothing
// with none. Callers hold s.mu.
func (s *Server) previewCancellation(sub *Subscription, at time.Time, behavior string) invoiceJSON {
	inv := s.cancellationInvoice(sub, at)
	if behavior == "none" {
		inv.Lines = newList("/v1/invoices/lines", []lineJSON{})
	}
	inv.BillingReason = "upcoming"
	s.applyTotals(sub, &inv)
	return inv
}

// cancellationLines credit, per item of sub, the unused time from at,
// rounded as prorate does. Callers hold s.mu.
func (s *Server) cancellationLines(sub *Subscription, at time.Time) []lineJSON {
	remaining := int64(sub.CurrentPeriodEnd.Sub(at) / time.Second)
	length := int64(sub.CurrentPeriodEnd.Sub(sub.CurrentPeriodStart) / time.Second)
	day := at.UTC().Format("02 Jan 2006")
	var lines []lineJSON
	for _, it := range sub.Items {
		pr := s.prices[it.PriceID]
		credit := -prorate(pr.unitAmount*it.Quantity, remaining, length)
		lines = append(lines, s.line(sub, pr, it.Quantity, credit, true,
			fmt.Sprintf("Unused time on %d × %s after %s", it.Quantity, pr.id, day), at, sub.CurrentPeriodEnd))
	}
	return lines
}

// cancellationInvoice is the final invoice of sub cancelled at at, before
// its totals. Callers hold s.mu.
func (s *Server) cancellationInvoice(sub *Subscription, at time.Time) invoiceJSON {
	lines := s.cancellationLines(sub, at)
	return invoiceJSON{
		Object: "invoice", BillingReason: "subscription_update",
		Customer: sub.Customer, Subscription: sub.ID, Currency: s.currency(sub), Created: at.Unix(),
		PeriodStart: at.Unix(), PeriodEnd: at.Unix(),
		Lines:               newList("/v1/invoices/lines", lines),
		SubscriptionDetails: &subscriptionDetailsJSON{Metadata: orEmpty(sub.Metadata)},
	}
}

// end cancels sub: status canceled, canceled_at and ended_at; a schedule
// still attached to it is canceled with it. Events:
// subscription_schedule.canceled, customer.subscription.deleted. Callers
// hold s.mu.
func (s *Server) end(sub *Subscription, canceledAt, endedAt time.Time) {
	sub.Status, sub.CanceledAt, sub.EndedAt = "canceled", canceledAt, endedAt
	if sub.CancellationDetails.Reason == "" {
		sub.CancellationDetails.Reason = "cancellation_requested"
	}
	if sch, ok := s.schedules[sub.Schedule]; ok && sch.live() {
		sch.Status, sch.CanceledAt = "canceled", canceledAt
		s.emitObject("subscription_schedule.canceled", s.toScheduleJSON(sch, nil))
	}
	sub.Schedule = ""
	s.emit("customer.subscription.deleted", sub)
}

// endAtPeriodEnd ends sub, set to cancel at its period's end, at that end
// instead of renewing it. Callers hold s.mu.
func (s *Server) endAtPeriodEnd(sub *Subscription) {
	canceledAt := sub.CanceledAt
	if canceledAt.IsZero() { // set so in the dashboard without a date
		canceledAt = sub.CurrentPeriodEnd
	}
	s.end(sub, canceledAt, sub.CurrentPeriodEnd)
}

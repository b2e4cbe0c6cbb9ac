package billing

import (
	"fmt"
	"time"
)

// The first call's target: what a request asks the subscription to
// become, and whether that can be quoted from the subscription as it is.

// target is what req asks of the subscription, as op reads it: the plan it
// is on, and what it is to become. A cancelled subscription changes no
// more, and one at its renewal changes only once the renewal is recorded.
func (s *Service) target(op *operation, sub Subscription, req ChangeRequest, now time.Time) (from Plan, w wanted, err error) {
	if sub.Status == "canceled" {
		return Plan{}, wanted{}, Errorf(CodeSubscriptionInactive,
			"the subscription was cancelled: it can no longer be changed, and nothing was done")
	}
	from, ok := s.catalog.Plan(sub.Plan)
	if !ok {
		return Plan{}, wanted{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("subscription of %s is on unknown plan %q", sub.Org, sub.Plan))
	}
	if w, err = op.target(s.catalog, sub, req); err != nil {
		return Plan{}, wanted{}, err
	}
	// The renewal could overtake a change at the period's end, a
	// cancellation or a resumption (datePassed, schedule.go, is the same
	// rule for the second call's terms).
	if s.renewalDue(sub, req.atPeriodEnd() || w.cancellation != "", now) {
		return Plan{}, wanted{}, errRenewalDue()
	}
	if err := schedulable(sub, from, w, req); err != nil {
		return Plan{}, wanted{}, err
	}
	return from, w, nil
}

// schedulable refuses a change at the period's end that the renewal would
// not make as quoted: a trial or an unpaid period ends otherwise than by a
// renewal at the price billingd quotes, and a subscription cancelled at the
// period's end does not renew at all.
func schedulable(sub Subscription, from Plan, w wanted, req ChangeRequest) error {
	if !req.atPeriodEnd() || w.cancellation != "" || from.ID == w.to.ID && w.seats == seats(sub.Quantity) {
		return nil
	}
	switch {
	case sub.CancelAtPeriodEnd:
		return Errorf(CodeInvalidPlanChange,
			"the subscription ends at the end of the period instead of renewing: resume it first, or make the change now")
	case sub.Status != "active":
		return Errorf(CodeInvalidPlanChange,
			"a change at the end of the period needs an active subscription; this one is %s: make the change now instead",
			sub.Status)
	}
	return nil
}

// alreadyThere reports whether the request asks for what the subscription
// already is or will be: its plan and seats with no change scheduled, or
// the change already scheduled; a cancellation already pending, or a
// resumption of a subscription that is not ending.
func alreadyThere(sub Subscription, w wanted, req ChangeRequest) bool {
	switch w.cancellation {
	case CancelAtPeriodEnd:
		return sub.CancelAtPeriodEnd && sub.Scheduled == nil
	case Resume:
		return !sub.CancelAtPeriodEnd
	case CancelNow:
		return false
	}
	if sc := sub.Scheduled; sc != nil {
		return req.atPeriodEnd() && sc.ToPlan == w.to.ID && sc.PriceID == w.to.StripePriceID && scheduledSeats(sub) == w.seats
	}
	return sub.Plan == w.to.ID && seats(sub.Quantity) == w.seats
}

// renewalDue reports whether sub is at its renewal (within renewalMargin):
// its scheduled change is taking effect and billingd has not recorded it
// yet, or, for a change at the period's end, the period is ending.
func (s *Service) renewalDue(sub Subscription, atPeriodEnd bool, now time.Time) bool {
	soon := now.Add(s.renewalMargin())
	return sub.Scheduled != nil && !soon.Before(sub.Scheduled.At) || atPeriodEnd && !soon.Before(sub.CurrentPeriodEnd)
}

// errRenewalDue: no change can be quoted or made from a subscription at
// its renewal: a scheduled change is taking effect, or the period ends.
func errRenewalDue() *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 30 * time.Second,
		Message: "the subscription is renewing at the payment provider (a scheduled change or the period's end is " +
			"due); nothing was changed: retry in a few minutes"}
}

package billing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Downgrades at the period's end (contract §6).
//
// Most SaaS products let a customer keep what they paid for until the period
// ends. A downgrade with "at": "period_end" changes nothing and charges or
// credits nothing now: its second call attaches a subscription schedule at
// the provider whose next phase, starting at the current period's end, is
// the new price. The provider makes the change at its renewal, with no call
// from billingd; billingd learns of it by a webhook or by syncing
// subscriptions whose scheduled date has passed (SyncScheduledChanges), and
// records when it applied (SCHEDULED_CHANGE_APPLIED). The receipt is the one
// signed when the change was scheduled, naming the date.
//
// While a change is scheduled:
//   - a first call for any other change says that it cancels the scheduled
//     one (Terms.Cancels), and its execution releases the schedule first;
//   - keeping the current plan is a handshake of its own: a first call whose
//     "to" is the current plan quotes "Keep …: cancel the change … scheduled
//     for …", and its second call only releases the schedule.
//
// The schedule is part of "the subscription the quote assumed": a schedule
// made or released elsewhere since the quote (Stripe's dashboard) is drift.

// keepsPlan reports whether t only cancels a scheduled change: it keeps
// the plan, the seats and the subscription's end.
func keepsPlan(t Terms) bool {
	return t.FromPlan == t.ToPlan && t.seatsTo() == t.seatsFrom() && t.Cancellation == "" && t.Cancels != nil
}

// scheduledSeats is the seats sub will have after its scheduled change.
func scheduledSeats(sub Subscription) int64 {
	if sc := sub.Scheduled; sc != nil && sc.Quantity > 0 {
		return sc.Quantity
	}
	return seats(sub.Quantity)
}

// scheduledFrom is the change of plan or seats the provider's subscription
// has scheduled, nil if none: a schedule whose next phase keeps the price
// and the seats changes nothing. A price outside the catalog is named by
// its id; the seats are named only when they change.
func (s *Service) scheduledFrom(state ProviderSubscription) *ScheduledChange {
	sched := state.Schedule
	if !scheduleChanges(state) {
		return nil
	}
	to := sched.NextPriceID
	if plan, ok := s.catalog.planByPrice(sched.NextPriceID); ok {
		to = plan.ID
	}
	sc := &ScheduledChange{ToPlan: to, At: sched.NextAt.UTC(), ConfirmationID: sched.ConfirmationID,
		ScheduleID: sched.ID, PriceID: sched.NextPriceID}
	if n := seats(sched.NextQuantity); n != seats(state.Quantity) {
		sc.Quantity = n
	}
	return sc
}

// scheduleChanges reports whether the provider's schedule will still
// change the subscription's price or seats.
func scheduleChanges(state ProviderSubscription) bool {
	sched := state.Schedule
	return sched.Scheduled() && !state.on(sched.NextPriceID, sched.NextQuantity)
}

// on reports whether the provider's subscription is on price with n seats.
func (state ProviderSubscription) on(price string, n int64) bool {
	return state.PriceID == price && seats(state.Quantity) == seats(n)
}

// sameScheduled reports whether two scheduled changes are the same change:
// the same price and seats at the same time (ids aside).
func sameScheduled(a, b *ScheduledChange) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.PriceID == b.PriceID && a.Quantity == b.Quantity && a.At.Equal(b.At)
}

// cancelledOn reports whether state is where the change t cancels would
// have put it: on its price with its seats (the renewal made it).
func cancelledOn(t Terms, state ProviderSubscription) bool {
	sc := t.Cancels
	return sc != nil && sc.PriceID != "" && state.on(sc.PriceID, cmp.Or(sc.Quantity, t.seatsFrom()))
}

// scheduleHolds reports whether the provider's schedule is still the one
// the quote of t assumed. A change that cancels the scheduled one also
// holds once it is gone: its own earlier attempt, or someone else, released
// it, and the change asked for is still the one agreed to.
//
// A schedule that changes more than billingd states (Opaque) never holds.
func (s *Service) scheduleHolds(t Terms, sub Subscription, state ProviderSubscription) bool {
	if state.Schedule != nil && state.Schedule.Opaque {
		return false
	}
	now := s.scheduledFrom(state)
	if sameScheduled(sub.Scheduled, now) {
		return true
	}
	return t.Cancels != nil && now == nil
}

// appliedAtProvider reports whether the provider's subscription shows c's
// change made: its metadata names c (a change made now), its schedule's
// does (a change scheduled for the period's end), or, for keeping the
// plan, no change is scheduled any more.
func appliedAtProvider(c Confirmation, state ProviderSubscription) bool {
	switch c.Terms.Cancellation {
	case CancelNow:
		// Stripe names no confirmation on a cancellation made now; a
		// subscription cancelled ends as the person agreed to, whoever
		// made it (and nothing else can be sent any more).
		return state.Status == "canceled"
	case CancelAtPeriodEnd:
		return state.CancelAtPeriodEnd && state.ConfirmationID == c.ID
	case Resume:
		return !state.CancelAtPeriodEnd && state.ConfirmationID == c.ID
	}
	switch {
	case keepsPlan(c.Terms):
		// Still on the plan kept: a renewal that made the scheduled change
		// first leaves nothing scheduled too, on the other plan.
		return state.on(c.Terms.FromPriceID, c.Terms.seatsFrom()) && !scheduleChanges(state)
	case c.Terms.AtPeriodEnd:
		return state.Schedule != nil && state.Schedule.ConfirmationID == c.ID
	default:
		return state.ConfirmationID == c.ID
	}
}

// confirmationsNamedBy are the confirmations the provider's subscription
// names as having made a change: its schedule's first.
func confirmationsNamedBy(state ProviderSubscription) []string {
	var ids []string
	if state.Schedule != nil && state.Schedule.ConfirmationID != "" {
		ids = append(ids, state.Schedule.ConfirmationID)
	}
	if state.ConfirmationID != "" {
		ids = append(ids, state.ConfirmationID)
	}
	return ids
}

// subscriptionAfter is billingd's copy of sub once c's change is made, as
// the provider answered it (applied).
func subscriptionAfter(c Confirmation, sub Subscription, applied AppliedChange) Subscription {
	t := c.Terms
	switch {
	case keepsPlan(t):
		sub.Scheduled = nil
	case t.AtPeriodEnd:
		sc := &ScheduledChange{ToPlan: t.ToPlan, At: t.NextChargeAt.UTC(), ConfirmationID: c.ID, PriceID: t.ToPriceID,
			Quantity: t.ToQuantity}
		if applied.Schedule != nil {
			sc.ScheduleID = applied.Schedule.ID
		}
		sub.Scheduled = sc
	default:
		sub.Plan, sub.Scheduled, sub.Quantity = t.ToPlan, nil, t.seatsTo()
	}
	switch t.Cancellation {
	case CancelAtPeriodEnd:
		sub.CancelAtPeriodEnd = true
	case Resume:
		sub.CancelAtPeriodEnd = false
	case CancelNow:
		sub.Status = "canceled"
	}
	if !applied.CanceledAt.IsZero() {
		sub.CanceledAt = applied.CanceledAt
	}
	if applied.Status != "" {
		sub.Status = applied.Status
	}
	if !applied.CurrentPeriodEnd.IsZero() && !t.AtPeriodEnd {
		sub.CurrentPeriodEnd = applied.CurrentPeriodEnd
	}
	if applied.ItemID != "" {
		sub.StripeItemID = applied.ItemID
	}
	if applied.Quantity > 0 {
		sub.Quantity = applied.Quantity
	}
	return sub
}

// recordScheduledApplied audits that the provider made old's scheduled
// change (its renewal), now that billingd's copy shows the new plan.
func (s *Service) recordScheduledApplied(ctx context.Context, tx Tx, org string, old *ScheduledChange, request string) error {
	caller := Caller{Org: org, RequestID: request}
	op := OpDowngrade
	if old.ConfirmationID != "" {
		c, _, err := tx.LockByID(ctx, org, old.ConfirmationID)
		switch {
		case err == nil:
			caller.Principal, caller.Client, op = c.Principal, c.Client, c.Operation
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("lock scheduled confirmation: %w", err)
		}
	}
	s.log.Info("scheduled plan change applied at the provider", "org", org, "to", old.ToPlan,
		"confirmation_id", old.ConfirmationID)
	ev := s.event(caller, op, EventScheduledChangeApplied, old.ConfirmationID, "")
	return tx.Record(ctx, Record{Events: []AuditEvent{ev}})
}

// scheduledApplied reports whether the provider's subscription (state)
// made old's scheduled change: nothing is scheduled any more and the price
// and seats are the ones that were.
func scheduledApplied(old, sub Subscription, state ProviderSubscription) bool {
	sc := old.Scheduled
	return sc != nil && sub.Scheduled == nil && sc.PriceID != "" && state.on(sc.PriceID, scheduledSeats(old))
}

// renewedFirst reports whether the provider's renewal made the change a
// keep of c was to cancel before the keep was made: the subscription
// (state) is where that change would have put it.
func renewedFirst(c Confirmation, state ProviderSubscription) bool {
	return keepsPlan(c.Terms) && state.PriceID != "" && cancelledOn(c.Terms, state)
}

// renewalMargin is how long before a renewal billingd stops sending what
// the renewal could overtake: a request leaves up to STRIPE_TIMEOUT after
// the last check and may take as long again at the provider (attemptOver),
// and the provider's clock may differ from the database's by the allowed
// skew. Within it, a change at the period's end could land after the
// renewal made another one, and a keep after the change it was to cancel.
func (s *Service) renewalMargin() time.Duration { return 3*s.execTimeout + s.skew }

// datePassed reports whether a date t's summary states (the scheduled
// change it cancels, or the period's end it schedules for) has come, or is
// within renewalMargin: the provider is making, or may make before the
// request lands, a change the summary does not show.
func (s *Service) datePassed(t Terms, now time.Time) bool {
	soon := now.Add(s.renewalMargin())
	return t.Cancels != nil && !soon.Before(t.Cancels.At) ||
		(t.AtPeriodEnd || t.Cancellation != "") && !soon.Before(t.NextChargeAt)
}

// termsHoldForResend is termsHold for sending again a change that was
// sent before (sent): the subscription may also have lost, since, the
// scheduled change the confirmation cancels, and nothing else. The release
// is the change's own first step: an earlier attempt made it and a webhook
// recorded it, one version later, with the status and period as quoted.
// A change never sent is judged by termsHold alone.
func (s *Service) termsHoldForResend(t Terms, sub Subscription, sent bool) bool {
	if s.termsHold(t, sub) {
		return true
	}
	ownRelease := sent && t.Cancels != nil && sub.Scheduled == nil && sub.Version == t.SubscriptionVer+1 &&
		sub.Status == t.FromStatus && sub.CurrentPeriodEnd.Equal(t.NextChargeAt)
	sub.Version = t.SubscriptionVer
	return ownRelease && s.termsHold(t, sub)
}

// SyncScheduledChanges reads back, from the provider, subscriptions whose
// scheduled change is due (its date passed more than grace ago) and records
// what the provider made of it, one transaction each, as a webhook would:
// a scheduled change applies at the provider's renewal without a call from
// billingd, and webhooks may be late, lost or not configured. It returns
// how many it looked at.
func (s *Service) SyncScheduledChanges(ctx context.Context, grace time.Duration, limit int) (int, error) {
	n := 0
	var seen []string
	for ; n < limit; n++ {
		found := true
		busy, err := s.admittedExecutionTx(ctx, func(tx Tx) error {
			acct, err := tx.LockDueScheduled(ctx, grace, seen)
			if errors.Is(err, ErrNotFound) {
				found = false
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock due scheduled change: %w", err)
			}
			seen = append(seen, acct.Subscription.StripeSubscriptionID)
			s.atAccount(ctx, StepRenewal, &acct)
			state, err := s.readBack(ctx, acct)
			if err != nil {
				// Not this round: the others are not held up by it.
				s.log.Warn("reading back a due scheduled change failed; will retry", "org", acct.Org.ID, "err", err)
				return nil
			}
			_, err = s.applyProviderState(ctx, tx, acct, state, time.Time{})
			return err
		})
		if err != nil {
			return n, storeError("sync scheduled change", err)
		}
		if busy || !found {
			return n, nil
		}
	}
	return n, nil
}

// afterRefusal is the answer to a change made now that the provider
// refused (or rate-limited) after its first step, the release of the
// scheduled change it cancels, may have been made: a refusal does not undo
// the release. The person agreed to the cancellation only as part of the
// change, so billingd schedules the released change again
// (restoreScheduled), records the subscription as the provider then has
// it, and says what stands.
func (s *Service) afterRefusal(ctx context.Context, tx Tx, c Confirmation, acct Account, now time.Time,
	refusal error) (outcome error, err error) {
	if c.Terms.Cancels == nil || c.Terms.AtPeriodEnd || keepsPlan(c.Terms) {
		return refusal, nil
	}
	state, err := s.readBack(ctx, acct)
	if err != nil {
		// The release may have been made: the settler reads back and puts
		// it back if so (restore.go); a webhook records the subscription.
		s.log.Warn("reading back after a refused change failed", "confirmation_id", c.ID, "err", err)
		if !s.restorable(c.Terms.Cancels, now) {
			return refusal, nil
		}
		return mayHaveReleased(refusal, s.scheduledStands(c, restoreOwed)), s.oweRestore(ctx, tx, c)
	}
	released := s.scheduledFrom(state) == nil
	restored := restoreLost
	if released {
		if restored, err = s.putBack(ctx, tx, c, acct, now, &state); err != nil {
			return nil, err
		}
	}
	changed, err := s.recordProviderState(ctx, tx, acct, state, time.Time{})
	if err != nil {
		return nil, err
	}
	var answer *Error
	if !released || !changed || !errors.As(refusal, &answer) {
		// Nothing moved (or billingd's copy shows it all the same): the
		// refusal is the whole answer.
		return refusal, nil
	}
	stands := s.scheduledStands(c, restored)
	if errors.Is(refusal, ErrRateLimited) {
		// The token went back to pending, and recording the subscription
		// as it now is revoked it as drift: not a call to retry.
		return &Error{Code: CodeTokenMismatch, Err: refusal, Message: "the payment provider refused the change " +
			"for now (too many requests) and it was not made; " + stands + ". This token is void: start again with a " +
			"first call"}, nil
	}
	told := *answer
	told.Message = strings.TrimSuffix(told.Message, ".") + "; " + stands + "."
	return &told, nil
}

// mayHaveReleased is refusal, told that the change's first step, the
// release of the scheduled change it cancels, may have been made (billingd
// could not read the subscription back to know): "nothing was changed" is
// then not known to be true. stands says what billingd does about it.
func mayHaveReleased(refusal error, stands string) error {
	var answer *Error
	if !errors.As(refusal, &answer) {
		return refusal
	}
	told := *answer
	told.Message = strings.Replace(strings.TrimSuffix(told.Message, "."), "nothing was changed", "the change was not made", 1) +
		"; its first step may have been made: if so, " + stands + "."
	return &told
}

// scheduledStands says what became of the scheduled change c's first step
// released, once c was not made: scheduled again, owed (billingd puts it
// back shortly), or lost.
func (s *Service) scheduledStands(c Confirmation, restored restoreOutcome) string {
	what := fmt.Sprintf("the change to %s scheduled for %s", s.scheduledWords(c.Terms.Cancels), day(c.Terms.Cancels.At))
	switch restored {
	case restoreRestored:
		return what + " stays scheduled (billingd scheduled it again after this change's first step had cancelled it)"
	case restoreOwed:
		return what + " was cancelled at the payment provider (the first step of this change) and will be put " +
			"back: billingd schedules it again within minutes, unless another change is made first"
	}
	return what + " was cancelled at the payment provider (the first step of this change) and could not be " +
		"scheduled again: ask for it again if it is still wanted"
}

// restoreScheduled schedules again, under key, the change c's first step
// released (c.Terms.Cancels, made through billingd: its schedule's metadata
// names the confirmation that scheduled it), with state the provider's
// subscription without it; on success state's schedule is the one made. A
// schedule an earlier attempt made without its phases (state.Schedule) is
// the one completed.
func (s *Service) restoreScheduled(ctx context.Context, c Confirmation, acct Account, state *ProviderSubscription,
	key string) error {
	sc := c.Terms.Cancels
	now := seats(cmp.Or(state.Quantity, c.Terms.Quantity)) // the seats Stripe has
	change := PlanChange{CustomerID: acct.Org.StripeCustomerID, SubscriptionID: acct.Subscription.StripeSubscriptionID,
		ItemID: acct.Subscription.StripeItemID, FromPriceID: state.PriceID, NewPriceID: sc.PriceID,
		FromQuantity: now, Quantity: cmp.Or(sc.Quantity, now), // a change of seats puts its seats back
		AtPeriodEnd: true, PeriodEnd: sc.At, ConfirmationID: sc.ConfirmationID, Attached: state.Schedule}
	s.at(ctx, StepRestore, &c)
	callCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	applied, err := s.payments.ApplyPlanChange(callCtx, change, key)
	if err != nil {
		s.log.Error("the scheduled change a change not made released could not be scheduled again",
			"confirmation_id", c.ID, "scheduled_by", sc.ConfirmationID, "err", err)
		return fmt.Errorf("schedule again: %w", err)
	}
	state.Schedule = applied.Schedule
	return nil
}

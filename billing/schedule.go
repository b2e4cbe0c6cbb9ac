package billing

import (
	"context"
	"errors"
	"fmt"
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

// keepsPlan reports whether t only cancels a scheduled change.
func keepsPlan(t Terms) bool { return t.FromPlan == t.ToPlan && t.Cancels != nil }

// scheduledFrom is the plan change the provider's subscription has
// scheduled, nil if none: a schedule whose next phase keeps the price
// changes no plan. A price outside the catalog is named by its id.
func (s *Service) scheduledFrom(state ProviderSubscription) *ScheduledChange {
	sched := state.Schedule
	if !sched.Scheduled() || sched.NextPriceID == state.PriceID {
		return nil
	}
	to := sched.NextPriceID
	if plan, ok := s.catalog.planByPrice(sched.NextPriceID); ok {
		to = plan.ID
	}
	return &ScheduledChange{ToPlan: to, At: sched.NextAt.UTC(), ConfirmationID: sched.ConfirmationID,
		ScheduleID: sched.ID, PriceID: sched.NextPriceID}
}

// sameScheduled reports whether two scheduled changes are the same change:
// the same price at the same time (ids aside).
func sameScheduled(a, b *ScheduledChange) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.PriceID == b.PriceID && a.At.Equal(b.At)
}

// scheduleHolds reports whether the provider's schedule is still the one
// the quote of t assumed. A change that cancels the scheduled one also
// holds once it is gone: its own earlier attempt, or someone else, released
// it, and the change asked for is still the one agreed to.
func (s *Service) scheduleHolds(t Terms, sub Subscription, state ProviderSubscription) bool {
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
	switch {
	case keepsPlan(c.Terms):
		return !state.Schedule.Scheduled() || state.Schedule.NextPriceID == state.PriceID
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
		sc := &ScheduledChange{ToPlan: t.ToPlan, At: t.NextChargeAt.UTC(), ConfirmationID: c.ID, PriceID: t.ToPriceID}
		if applied.Schedule != nil {
			sc.ScheduleID = applied.Schedule.ID
		}
		sub.Scheduled = sc
	default:
		sub.Plan, sub.Scheduled = t.ToPlan, nil
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

// scheduledApplied reports whether going from old to sub is the provider
// making old's scheduled change.
func scheduledApplied(old, sub Subscription) bool {
	return old.Scheduled != nil && sub.Scheduled == nil && sub.Plan != old.Plan && sub.Plan == old.Scheduled.ToPlan
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
			state, err := s.readBack(ctx, acct)
			if err != nil {
				return err
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

package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SubscriptionEvent is a change to a subscription reported by the payment
// provider (a Stripe webhook), already authenticated. Only its id and
// subscription are acted on: billingd reads the subscription itself.
type SubscriptionEvent struct {
	EventID          string
	Created          time.Time
	Deleted          bool
	SubscriptionID   string
	PriceID          string
	ItemID           string
	Status           string
	CurrentPeriodEnd time.Time
	// ConfirmationID names the confirmation that last changed the plan (the
	// subscription's metadata), if billingd made the change.
	ConfirmationID string
}

// ReconcileOutcome says what a provider event did.
type ReconcileOutcome string

// Outcomes of ReconcileSubscription.
const (
	ReconcileApplied   ReconcileOutcome = "applied"
	ReconcileDuplicate ReconcileOutcome = "duplicate"   // the event id was seen before
	ReconcileUnchanged ReconcileOutcome = "unchanged"   // billingd's copy already matched the provider's
	ReconcileUnknown   ReconcileOutcome = "unknown_sub" // not a subscription billingd manages
)

// ReconcileSubscription brings billingd's copy of a subscription to what
// the provider has now, on a provider event. The event is only a hint:
// Stripe sends events late, twice and in any order, so billingd reads the
// subscription itself, while it holds the subscription's row lock, and
// records that. No order of deliveries can then leave billingd on a plan
// other than Stripe's. An executing confirmation the subscription shows
// applied is recorded as executed (with its receipt); every pending
// confirmation whose summary no longer holds is revoked (TOKEN_REVOKED,
// reason drift), in the same transaction, so no token can execute a change
// its human never saw. Event ids are recorded so that a delivery is acted
// on once; a failure rolls that back too, and Stripe delivers again.
func (s *Service) ReconcileSubscription(ctx context.Context, ev SubscriptionEvent) (ReconcileOutcome, error) {
	var outcome ReconcileOutcome
	busy, err := s.admittedExecutionTx(ctx, func(tx Tx) error {
		first, err := tx.MarkEventProcessed(ctx, ev.EventID)
		if err != nil || !first {
			outcome = ReconcileDuplicate
			return err
		}
		acct, err := tx.LockSubscription(ctx, ev.SubscriptionID)
		if errors.Is(err, ErrNotFound) {
			outcome = ReconcileUnknown
			return nil
		}
		if err != nil {
			return err
		}
		s.atAccount(ctx, StepWebhookRead, &acct)
		state, err := s.stateAfter(ctx, ev)
		if err != nil {
			return err
		}
		if outcome, err = s.applyProviderState(ctx, tx, acct, state, ev.Created); err != nil {
			return err
		}
		s.atAccount(ctx, StepWebhookCommit, &acct)
		return nil
	})
	if busy { // 503: Stripe delivers the event again later
		return "", errBusy(true)
	}
	if err != nil {
		return "", storeError("reconcile subscription", err)
	}
	return outcome, nil
}

// stateAfter reads the subscription an event is about, as the provider has
// it now. A deleted subscription the provider no longer returns is the
// event's, canceled.
func (s *Service) stateAfter(ctx context.Context, ev SubscriptionEvent) (ProviderSubscription, error) {
	readCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	state, err := s.payments.ReadSubscription(readCtx, ev.SubscriptionID)
	if err != nil && ev.Deleted && errors.Is(err, ErrProviderRejected) {
		return ProviderSubscription{PriceID: ev.PriceID, ItemID: ev.ItemID, Items: 1,
			Status: "canceled", CurrentPeriodEnd: ev.CurrentPeriodEnd, CanceledAt: ev.Created}, nil
	}
	if err != nil {
		return ProviderSubscription{}, fmt.Errorf("read subscription %s: %w", ev.SubscriptionID, err)
	}
	return state, nil
}

// applyProviderState records state, the provider's subscription of acct
// read under its lock: first the executing confirmation it shows applied,
// if any, then the rest as drift.
func (s *Service) applyProviderState(ctx context.Context, tx Tx, acct Account, state ProviderSubscription, seen time.Time) (ReconcileOutcome, error) {
	settled, err := s.settleFromState(ctx, tx, acct, state, seen)
	if err != nil || settled {
		return ReconcileApplied, err
	}
	changed, err := s.recordProviderState(ctx, tx, acct, state, seen)
	if err != nil {
		return "", err
	}
	if changed {
		return ReconcileApplied, nil
	}
	return ReconcileUnchanged, nil
}

// settleFromState records the executing confirmation the provider's
// subscription names (its metadata, or its schedule's) as executed: billingd
// sent the change and the answer was lost, or billingd died before it
// recorded it (or, should the provider have applied it later than any
// request could take, one recorded as not made), with the subscription as
// the provider has it now (recordAppliedAtProvider). It reports whether it
// recorded one.
func (s *Service) settleFromState(ctx context.Context, tx Tx, acct Account, state ProviderSubscription, seen time.Time) (bool, error) {
	for _, id := range confirmationsNamedBy(state) {
		c, now, err := tx.LockByID(ctx, acct.Org.ID, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("lock confirmation of event: %w", err)
		}
		switch {
		case !appliedAtProvider(c, state):
			continue
		case c.Status == StatusFailed && c.Failure == reasonNotApplied:
			// Recorded as not made once its request was certainly over, and
			// yet Stripe shows it: Stripe is the truth. Recorded as
			// executed, late.
			s.log.Error("a change recorded as not made was applied by the provider; recording it as executed",
				"confirmation_id", c.ID, "org", c.Org)
		case c.Status != StatusExecuting:
			continue
		}
		caller := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client, RequestID: "webhook"}
		_, err = s.recordAppliedAtProvider(ctx, tx, caller, c, acct, now, state, seen)
		return err == nil, err
	}
	return false, nil
}

// executedAccount is acct as recordExecuted left it after executing c.
func executedAccount(acct Account, c Confirmation, state ProviderSubscription) Account {
	acct.Subscription = subscriptionAfter(c, acct.Subscription, appliedFrom(c, state))
	acct.Subscription.Version++
	return acct
}

// recordProviderState makes billingd's copy of acct's subscription what
// the provider has (state) and revokes the org's pending confirmations
// whose summary no longer holds. seen, if set, is recorded as when billingd
// last heard from the provider. It reports whether the copy changed.
func (s *Service) recordProviderState(ctx context.Context, tx Tx, acct Account, state ProviderSubscription, seen time.Time) (bool, error) {
	old := acct.Subscription
	sub := s.subscriptionFrom(old, state)
	if !seen.IsZero() {
		sub.SyncedAt = seen
	}
	if sub.Plan == old.Plan && sub.Status == old.Status && sub.StripeItemID == old.StripeItemID && seats(sub.Quantity) == seats(old.Quantity) &&
		sub.CancelAtPeriodEnd == old.CancelAtPeriodEnd && sub.CanceledAt.Equal(old.CanceledAt) &&
		sub.CurrentPeriodEnd.Equal(old.CurrentPeriodEnd) && sameScheduled(sub.Scheduled, old.Scheduled) &&
		scheduleID(sub.Scheduled) == scheduleID(old.Scheduled) {
		if seen.IsZero() {
			return false, nil
		}
		return false, tx.Record(ctx, Record{SyncedSubscription: &sub})
	}
	if err := tx.Record(ctx, Record{Subscription: &sub}); err != nil {
		return false, err
	}
	if scheduledApplied(old, sub, state) {
		if err := s.recordScheduledApplied(ctx, tx, old.Org, old.Scheduled, "renewal"); err != nil {
			return false, err
		}
	}
	sub.Version = old.Version + 1 // what Record made it
	return true, s.revokeDrifted(ctx, tx, acct.Org.ID, sub)
}

// subscriptionFrom is billingd's copy of the subscription as the provider
// has it. A price outside the catalog keeps the plan id (the change will
// show as drift all the same, through the status or period, and the check
// at execution refuses every token quoted from the old price) and is logged
// for an operator.
func (s *Service) subscriptionFrom(old Subscription, state ProviderSubscription) Subscription {
	sub := old
	sub.Status, sub.CancelAtPeriodEnd, sub.CanceledAt = state.Status, state.CancelAtPeriodEnd, state.CanceledAt
	if !state.CurrentPeriodEnd.IsZero() {
		sub.CurrentPeriodEnd = state.CurrentPeriodEnd
	}
	if state.ItemID != "" {
		sub.StripeItemID = state.ItemID
	}
	if state.Quantity > 0 {
		sub.Quantity = state.Quantity
	}
	if plan, ok := s.catalog.planByPrice(state.PriceID); ok {
		sub.Plan = plan.ID
	} else if state.PriceID != "" {
		s.log.Warn("subscription moved to a price outside the catalog", "org", old.Org, "price", state.PriceID)
	}
	sub.Scheduled = s.scheduledFrom(state)
	return sub
}

func scheduleID(sc *ScheduledChange) string {
	if sc == nil {
		return ""
	}
	return sc.ScheduleID
}

// revokeDrifted revokes the org's pending confirmations whose terms no
// longer hold for sub.
func (s *Service) revokeDrifted(ctx context.Context, tx Tx, org string, sub Subscription) error {
	pending, err := tx.LockPending(ctx, org)
	if err != nil {
		return fmt.Errorf("lock pending confirmations: %w", err)
	}
	for _, c := range pending {
		if s.termsHold(c.Terms, sub) {
			continue
		}
		if err := s.revokeAsDrift(ctx, tx, Caller{Org: c.Org, Principal: c.Principal, Client: c.Client}, c); err != nil {
			return err
		}
	}
	return nil
}

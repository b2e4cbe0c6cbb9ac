package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SubscriptionEvent is a change to a subscription reported by the payment
// provider (a Stripe webhook), already authenticated.
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
	ReconcileStale     ReconcileOutcome = "stale"       // older than the last event applied
	ReconcileUnchanged ReconcileOutcome = "unchanged"   // billingd's copy already matches (e.g. its own change)
	ReconcileUnknown   ReconcileOutcome = "unknown_sub" // not a subscription billingd manages
)

// ReconcileSubscription applies a provider event to billingd's copy of the
// subscription. When the copy changes, every pending confirmation of the org
// whose summary no longer holds is revoked (TOKEN_REVOKED, reason drift), in
// the same transaction, so no token can execute a change its human never saw.
// Events are deduplicated by id and applied at most once.
func (s *Service) ReconcileSubscription(ctx context.Context, ev SubscriptionEvent) (ReconcileOutcome, error) {
	var outcome ReconcileOutcome
	err := s.store.InTx(ctx, func(tx Tx) error {
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
		outcome, err = s.applyEvent(ctx, tx, acct, ev)
		return err
	})
	if err != nil {
		return "", storeError("reconcile subscription", err)
	}
	return outcome, nil
}

func (s *Service) applyEvent(ctx context.Context, tx Tx, acct Account, ev SubscriptionEvent) (ReconcileOutcome, error) {
	old := acct.Subscription
	if !old.SyncedAt.IsZero() && ev.Created.Before(old.SyncedAt) {
		return ReconcileStale, nil
	}
	if settled, err := s.settleFromEvent(ctx, tx, acct, ev); settled || err != nil {
		return ReconcileApplied, err
	}
	sub := s.subscriptionAfter(old, ev)
	if sub.Plan == old.Plan && sub.Status == old.Status && sub.StripeItemID == old.StripeItemID &&
		sub.CurrentPeriodEnd.Equal(old.CurrentPeriodEnd) {
		return ReconcileUnchanged, tx.Record(ctx, Record{SyncedSubscription: &sub})
	}
	if err := tx.Record(ctx, Record{Subscription: &sub}); err != nil {
		return "", err
	}
	sub.Version = old.Version + 1 // what Record made it
	if err := s.revokeDrifted(ctx, tx, acct.Org.ID, sub); err != nil {
		return "", err
	}
	return ReconcileApplied, nil
}

// settleFromEvent records a change billingd asked for and has not recorded
// yet (executing: the answer was lost; pending: the database failed before
// the commit) when the event shows it applied: the event names the
// confirmation and carries its new price. It then revokes the pending
// confirmations the change made stale.
func (s *Service) settleFromEvent(ctx context.Context, tx Tx, acct Account, ev SubscriptionEvent) (bool, error) {
	if ev.ConfirmationID == "" || ev.Deleted {
		return false, nil
	}
	c, now, err := tx.LockByID(ctx, acct.Org.ID, ev.ConfirmationID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock confirmation of event: %w", err)
	}
	plan, ok := s.catalog.planByPrice(ev.PriceID)
	if c.Status != StatusExecuting && c.Status != StatusPending || !ok || plan.ID != c.Terms.ToPlan ||
		acct.Subscription.Plan != c.Terms.FromPlan {
		return false, nil
	}
	sub := acct.Subscription
	sub.SyncedAt = ev.Created
	caller := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client, RequestID: "webhook"}
	applied := AppliedChange{Status: ev.Status, CurrentPeriodEnd: ev.CurrentPeriodEnd, ItemID: ev.ItemID}
	if _, err := s.recordExecuted(ctx, tx, caller, c, sub, now, applied); err != nil {
		return false, err
	}
	sub.Plan, sub.Version = c.Terms.ToPlan, sub.Version+1 // what recordExecuted made it
	return true, s.revokeDrifted(ctx, tx, acct.Org.ID, sub)
}

// subscriptionAfter is billingd's copy of the subscription after ev. A price
// outside the catalog keeps the plan id (the change will show as drift all
// the same, through the status or period) and is logged for an operator.
func (s *Service) subscriptionAfter(old Subscription, ev SubscriptionEvent) Subscription {
	sub := old
	sub.Status, sub.SyncedAt = ev.Status, ev.Created
	if !ev.CurrentPeriodEnd.IsZero() {
		sub.CurrentPeriodEnd = ev.CurrentPeriodEnd
	}
	if ev.ItemID != "" {
		sub.StripeItemID = ev.ItemID
	}
	if plan, ok := s.catalog.planByPrice(ev.PriceID); ok {
		sub.Plan = plan.ID
	} else if ev.PriceID != "" {
		s.log.Warn("subscription moved to a price outside the catalog", "org", old.Org, "price", ev.PriceID)
	}
	if ev.Deleted {
		sub.Status = "canceled"
	}
	return sub
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
		caller := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client}
		ev := s.event(caller, c.Operation, EventTokenRevoked, c.ID, "drift")
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusRevoked, Events: []AuditEvent{ev}}); err != nil {
			return err
		}
	}
	return nil
}

package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Settling unknown outcomes.
//
// When the provider does not say whether it made a change (a timeout, a 5xx,
// a lost answer), the confirmation is committed as executing and settled by
// whoever comes first: the owner repeating the second call, the background
// reconciler (SettleUnknownOutcomes, run by every replica), or a webhook that
// shows the change (ReconcileSubscription). Settling never makes a second
// change for one confirmation:
//
//  1. The same request is sent again under the same idempotency key. Stripe
//     replays the first answer: a success or a definite refusal settles it.
//     No answer, or the key still in flight: still unknown, try later.
//  2. A replayed 5xx means the first request is over but may or may not have
//     changed the subscription, and that key will answer 5xx for 24 hours.
//     The subscription is read back: its metadata names the confirmation that
//     last changed it and its item the price. Applied: recorded as executed.
//     Not applied: the change is sent once more under the next attempt's key.
//
// While a confirmation is executing, no other change of the subscription is
// proposed or executed (Account.Unsettled), so the read-back is never
// ambiguous and an old intent is never applied on top of a newer one.

// maxSettleAge is how long after its first call a confirmation may still be
// sent again under a new key; after that a change shown as not applied is
// recorded as failed (Stripe keeps idempotency keys for 24 hours).
const maxSettleAge = 24 * time.Hour

const (
	reasonOutcomeUnknown = "outcome_unknown"
	reasonDailyLimit     = "daily limit"
)

// settle finds out what became of an executing confirmation and records it.
func (s *Service) settle(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time) (redemption, error) {
	if err := beforeProvider(ctx, tx); err != nil {
		return redemption{}, err
	}
	ctx, cancel := s.afterSideEffect(ctx)
	defer cancel()
	tooOld := now.Sub(c.CreatedAt) > maxSettleAge
	if !tooOld { // past it, Stripe may have forgotten the key: a resend would be a new request
		applied, err := s.apply(ctx, c, acct)
		if !needsReadBack(err) {
			return s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err)
		}
	}
	state, readErr := s.payments.ReadSubscription(ctx, acct.Subscription.StripeSubscriptionID)
	if readErr != nil { // whatever the read says, it says nothing about the change
		return s.recordAttempt(ctx, tx, caller, c, acct, now, AppliedChange{}, fmt.Errorf("%w: read back: %w", ErrUnavailable, readErr))
	}
	if state.ConfirmationID == c.ID && state.PriceID == c.Terms.ToPriceID {
		return s.recordExecuted(ctx, tx, caller, c, acct.Subscription, now, appliedFrom(state))
	}
	// Certainly not applied: the request under the last key is over and the
	// subscription does not show it.
	c.Attempt++
	if tooOld || !s.termsHold(c.Terms, acct.Subscription) {
		failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, "not_applied")
		return redemption{outcome: Errorf(CodeTokenInvalid, "the change was not made and can no longer be retried: start again with a first call")},
			tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed, Attempt: &c.Attempt, Events: []AuditEvent{failed}})
	}
	applied, err := s.apply(ctx, c, acct)
	return s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err)
}

// needsReadBack reports whether the answer to a resent request leaves only
// the subscription itself to tell whether the change was made: a 5xx (Stripe
// replays it for 24 hours) or a refusal other than a declined payment, which
// may be Stripe refusing the resend itself (an idempotency_error, a key it no
// longer knows) rather than replaying the first answer. Either way the first
// request is over (one still in flight answers 409, which stays unknown).
func needsReadBack(err error) bool {
	return errors.Is(err, ErrProviderFailed) || errors.Is(err, ErrProviderRejected)
}

func appliedFrom(p ProviderSubscription) AppliedChange {
	return AppliedChange{Status: p.Status, CurrentPeriodEnd: p.CurrentPeriodEnd, ItemID: p.ItemID}
}

// SettleUnknownOutcomes settles executing confirmations whose last attempt is
// older than idle, one transaction each, and returns how many it looked at.
// Every replica may run it: a confirmation being settled elsewhere is
// skipped. Confirmations it cannot settle yet stay executing and are tried
// again once idle has passed.
func (s *Service) SettleUnknownOutcomes(ctx context.Context, idle time.Duration, limit int) (int, error) {
	n := 0
	for ; n < limit; n++ {
		found := true
		err := s.store.InTx(ctx, func(tx Tx) error {
			c, acct, now, err := tx.LockUnsettled(ctx, idle)
			if errors.Is(err, ErrNotFound) {
				found = false
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock unsettled confirmation: %w", err)
			}
			caller := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client, RequestID: "settle"}
			_, err = s.settle(ctx, tx, caller, c, acct, now)
			return err
		})
		if err != nil {
			return n, storeError("settle unknown outcome", err)
		}
		if !found {
			return n, nil
		}
	}
	return n, nil
}

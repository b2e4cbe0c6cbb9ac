package billing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Settling unknown outcomes.
//
// A second call commits a recovery point (the confirmation executing,
// SaveRecoveryPoint) before its provider request leaves. If the request's
// answer is lost (a timeout, a 5xx, a reset) or billingd dies before it
// records the answer, the confirmation stays executing and is settled by
// whoever comes first: the owner repeating the second call, the background
// settler of any replica (SettleUnknownOutcomes), or a webhook that shows
// the change (ReconcileSubscription). Settling never makes a second change
// for one confirmation, and never sends one the person's consent no longer
// covers:
//
//  1. The subscription is read back. Its metadata names the confirmation
//     whose update last changed it: if that is this one, the change was
//     applied, whatever happened to the subscription since (a price changed
//     in the dashboard does not make an applied change look unapplied).
//  2. While the consent still holds (consentHolds: the whole policy allows
//     the change and it is at most the token's lifetime since the second
//     call) and the subscription is still the one quoted, the same request
//     is sent again under the same idempotency key. Stripe replays the
//     first answer: a success or a definite refusal settles it. No answer,
//     or the key still in flight: still unknown. A replayed 5xx (Stripe
//     keeps it for that key for 24 hours) means the first request is over:
//     the subscription is read back again.
//  3. Not applied: while the consent holds, the change is sent once more
//     under the next attempt's key, after a recovery point of its own;
//     once it no longer holds and the last request is certainly over, it is
//     recorded as not made (OPERATION_FAILED, reason not_applied).
//
// While a confirmation is executing, no other change of the subscription is
// proposed or executed (Account.Unsettled), so the read-back is never
// ambiguous and an old intent is never applied on top of a newer one.

const (
	reasonOutcomeUnknown = "outcome_unknown"
	reasonNotApplied     = "not_applied"
	// reasonRenewedFirst: the renewal made the scheduled change a keep
	// was to cancel before the keep was made.
	reasonRenewedFirst = "renewed_first"
	reasonDailyLimit   = "daily limit"
)

// settle finds out what became of an executing confirmation and records it.
func (s *Service) settle(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time) (redemption, error) {
	consent, err := s.consentHolds(ctx, tx, c, acct, now)
	if err != nil {
		return redemption{}, err
	}
	ctx, cancel := s.afterSideEffect(ctx)
	defer cancel()
	s.at(ctx, StepSettleReadBack, &c)
	state, err := s.readBack(ctx, acct)
	if err != nil {
		return s.recordAttempt(ctx, tx, caller, c, acct, now, AppliedChange{}, err, false)
	}
	if appliedAtProvider(c, state) {
		return s.recordAppliedAtProvider(ctx, tx, caller, c, acct, now, state, time.Time{})
	}
	if !consent || !s.quoteHolds(c, acct.Subscription, state) {
		if !s.attemptOver(c, now) {
			// Nothing may be sent, and a request may still be under way at
			// the provider: "not made" cannot be told from "not yet".
			return redemption{outcome: errOutcomeUnknown(nil)}, nil
		}
		return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
	}
	// The same request under the same key: Stripe replays its first answer,
	// or makes the change if the first request never reached it, which the
	// consent still covers.
	s.at(ctx, StepSettleResend, &c)
	applied, err := s.apply(ctx, c, acct, state.Schedule)
	if !needsReadBack(err) {
		return s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err, false)
	}
	if state, err = s.readBack(ctx, acct); err != nil {
		return s.recordAttempt(ctx, tx, caller, c, acct, now, AppliedChange{}, err, false)
	}
	if appliedAtProvider(c, state) {
		return s.recordAppliedAtProvider(ctx, tx, caller, c, acct, now, state, time.Time{})
	}
	if !s.quoteHolds(c, acct.Subscription, state) {
		return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
	}
	// Certainly not applied: the request under the last key is over and the
	// subscription does not show it. The next attempt has its own key and
	// its own recovery point.
	next := c.Attempt + 1
	c, acct, now, err = tx.SaveRecoveryPoint(ctx, c.ID, next, nil)
	if err != nil {
		return redemption{}, fmt.Errorf("save recovery point: %w", err)
	}
	return s.afterRecoveryPoint(ctx, tx, caller, c, acct, now, next, state.Schedule)
}

// readBack reads acct's subscription at the provider to settle a change;
// a failure says nothing about the change (ErrUnavailable).
func (s *Service) readBack(ctx context.Context, acct Account) (ProviderSubscription, error) {
	readCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	state, err := s.payments.ReadSubscription(readCtx, acct.Subscription.StripeSubscriptionID)
	if err != nil {
		return ProviderSubscription{}, fmt.Errorf("%w: read back: %w", ErrUnavailable, err)
	}
	return state, nil
}

// consentHolds reports whether the person's consent still covers sending
// c's change: the second call was made at most the token's lifetime ago,
// billingd's copy of the subscription is still the one quoted, no date the
// summary states has come (datePassed), and the org's whole policy, as it
// is now, allows the change (an approval or a verification it asks for was
// given).
func (s *Service) consentHolds(ctx context.Context, tx Tx, c Confirmation, acct Account, now time.Time) (bool, error) {
	sentAt := c.SentAt
	if sentAt.IsZero() {
		sentAt = c.AttemptedAt
	}
	if sentAt.IsZero() || now.Sub(sentAt) > s.ttl || !s.termsHoldForResend(c.Terms, acct.Subscription, true) ||
		s.datePassed(c.Terms, now) {
		return false, nil
	}
	if held, err := s.mandateStillHolds(ctx, tx, c, now); !held || err != nil {
		return false, err
	}
	action, _, err := s.policyNow(ctx, tx, c, acct.Policy, false)
	if err != nil {
		return false, err
	}
	switch action {
	case ActionDeny:
		return false, nil
	case ActionApprove:
		return c.Approval == ApprovalGranted && len(c.Approvers) >= acct.Policy.approvalsRequired(factsOf(c, false)), nil
	case ActionVerify:
		return c.Verification != nil, nil
	}
	return !c.VerifyRequired || c.Verification != nil, nil
}

// attemptOver reports whether c's last request is certainly over at the
// provider. attempted_at is its recovery point: the request left within
// STRIPE_TIMEOUT of it or not at all (afterRecoveryPoint), billingd gave up
// on it STRIPE_TIMEOUT after it left, and the provider finishes or drops a
// request well within as long again.
func (s *Service) attemptOver(c Confirmation, now time.Time) bool {
	return !c.AttemptedAt.IsZero() && now.Sub(c.AttemptedAt) > 3*s.execTimeout
}

// recordAppliedAtProvider records c as executed because the provider's
// subscription names it, then records the subscription as the provider has
// it now, if it has changed since (drift); seen as recordProviderState
// takes it. Settling and webhooks both record an applied change this way.
func (s *Service) recordAppliedAtProvider(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account,
	now time.Time, state ProviderSubscription, seen time.Time) (redemption, error) {
	applied := appliedFrom(c, state)
	applied.Invoice = s.ownInvoice(ctx, c, acct.Subscription.StripeSubscriptionID, applied.Invoice)
	r, err := s.recordExecuted(ctx, tx, caller, c, acct.Subscription, now, applied)
	if err != nil {
		return r, err
	}
	_, err = s.recordProviderState(ctx, tx, executedAccount(acct, c, state), state, seen)
	return r, err
}

// appliedFrom is c's change as the provider's subscription shows it made.
func appliedFrom(c Confirmation, state ProviderSubscription) AppliedChange {
	return AppliedChange{Status: state.Status, CurrentPeriodEnd: state.CurrentPeriodEnd, ItemID: state.ItemID,
		Quantity: state.Quantity, Invoice: invoiceOf(state.LatestInvoice, c), Schedule: state.Schedule,
		CancelAtPeriodEnd: state.CancelAtPeriodEnd, CanceledAt: state.CanceledAt}
}

// recordNotMade records that c's change was not made and will not be,
// and the subscription as the provider has it (state), if it moved. A
// scheduled change that c's first step released is scheduled again, as
// after a refusal (afterRefusal), and the answer says what stands: the
// person agreed to cancel it only as part of a change that was not made.
// A subscription on the scheduled change's price was renewed first: the
// renewal made it, and there is nothing to put back.
func (s *Service) recordNotMade(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account,
	now time.Time, state ProviderSubscription) (redemption, error) {
	reason := reasonNotApplied
	if renewedFirst(c, state) {
		reason = reasonRenewedFirst
	}
	failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, reason)
	c.Failure = reason
	if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed, Failure: reason,
		Events: []AuditEvent{failed}}); err != nil {
		return redemption{}, err
	}
	answer := errFailed(c)
	sc := c.Terms.Cancels
	switch {
	case sc == nil || c.Terms.AtPeriodEnd || s.scheduledFrom(state) != nil || reason == reasonRenewedFirst:
	case cancelledOn(c.Terms, state):
		answer.Message = strings.TrimSuffix(answer.Message, ".") + fmt.Sprintf("; the change to %s scheduled for %s "+
			"took effect at the renewal.", s.scheduledWords(sc), day(sc.At))
	case !state.on(c.Terms.FromPriceID, c.Terms.seatsFrom()):
		// On a price (or seats) other than the ones quoted (changed elsewhere), the
		// change scheduled from it is not the one agreed to: not made again.
		answer.Message = strings.TrimSuffix(answer.Message, ".") + "; " + s.scheduledStands(c, restoreLost) + "."
	default:
		restored, err := s.putBack(ctx, tx, c, acct, now, &state)
		if err != nil {
			return redemption{}, err
		}
		answer.Message = strings.TrimSuffix(answer.Message, ".") + "; " + s.scheduledStands(c, restored) + "."
	}
	_, err := s.recordProviderState(ctx, tx, acct, state, time.Time{})
	return redemption{outcome: answer}, err
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

// SettleUnknownOutcomes settles executing confirmations whose last attempt is
// older than idle, one transaction each, and returns how many it looked at.
// Every replica may run it: a confirmation being settled elsewhere is
// skipped. Confirmations it cannot settle yet, or whose settling failed,
// stay executing and are tried again once idle has passed; the round goes
// on past them.
func (s *Service) SettleUnknownOutcomes(ctx context.Context, idle time.Duration, limit int) (int, error) {
	n, failed := 0, 0
	var seen []string // a confirmation that cannot be settled yet is not looked at twice in a round
	// Those whose settling failed do not count against limit: however many
	// fail on every try, a round still settles up to limit of the others.
	for ; n-failed < limit; n++ {
		found, locked := true, ""
		busy, err := s.admittedExecutionTx(ctx, func(tx Tx) error {
			c, acct, now, err := tx.LockUnsettled(ctx, idle, seen)
			if errors.Is(err, ErrNotFound) {
				found = false
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock unsettled confirmation: %w", err)
			}
			seen = append(seen, c.ID) // kept when the transaction rolls back
			locked = c.ID
			s.at(ctx, StepSettleLock, &c)
			caller := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client, RequestID: "settle"}
			if _, err = s.settle(ctx, tx, caller, c, acct, now); err != nil {
				return err
			}
			s.at(ctx, StepSettleCommit, &c)
			return nil
		})
		if err != nil && locked != "" {
			// One confirmation whose settling fails on every try (the
			// oldest, which every round locks first) must not hold up the
			// others: it stays executing and is tried again next round.
			s.log.Warn("settling an unknown outcome failed; will retry", "confirmation_id", locked, "err", err)
			failed++
			continue
		}
		if err != nil {
			return n, storeError("settle unknown outcome", err)
		}
		if busy || !found { // busy: second calls hold every slot; the next round goes on
			return n, nil
		}
	}
	return n, nil
}

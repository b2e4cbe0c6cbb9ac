package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// confirm is the second call. Its money path is a sequence of named steps,
// each in consume or the functions it calls:
//
//  1. consume: lock the subscription and the confirmation (in that order,
//     the one lock order of every step), check every rule and the policy.
//  2. checkAtProvider: the subscription at the provider is still what the
//     quote assumed; otherwise the token is revoked as drift.
//  3. SaveRecoveryPoint: the confirmation is committed as executing, so
//     that a crash from here on leaves a row any replica settles.
//  4. send: the provider request under the attempt's idempotency key.
//  5. recordAttempt: executed (with the receipt), failed, or still unknown.
//  6. commit; an unknown outcome is settled (settle.go).
//
// Refusals are recorded and committed too, so that a mismatching call
// really voids its token and leaves an audit trail.
func (s *Service) confirm(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	var r redemption
	err := s.executions.InTx(ctx, func(tx Tx) (err error) {
		r, err = s.consume(ctx, tx, caller, req)
		if err == nil {
			s.at(ctx, StepCommit, &Confirmation{Org: caller.Org})
		}
		return err
	})
	if err != nil {
		if r.recoveryPoint {
			// The COMMIT itself failed (a restart, a failover, a dropped
			// connection): what was recorded after the recovery point is
			// lost, not what was sent.
			err = settledLater(err)
		}
		return ChangeResult{}, answerFor(req, s.rolledBack(req, err))
	}
	return r.result, answerFor(req, r.outcome)
}

// redemption is what a second call's transaction decided.
type redemption struct {
	result  ChangeResult
	outcome error // the error the caller gets once the transaction committed
	// recoveryPoint: the confirmation was committed executing (it may have
	// been sent), so any later failure, the final COMMIT's included, leaves
	// an outcome that is not yet known and is settled.
	recoveryPoint bool
}

// consume is the step that uses a token up: the second call inside its
// transaction. It locks the subscription and the confirmation, checks every
// rule, executes and records. A returned error rolls the transaction back
// (to the recovery point, if one was saved); a refusal is an outcome,
// recorded and committed.
func (s *Service) consume(ctx context.Context, tx Tx, caller Caller, req ChangeRequest) (redemption, error) {
	// The rate limit on failed second calls is read in the lock's round
	// trip, in front of it. A caller over the limit is told so before
	// anything is recorded; it took no lock unless its token is one of its
	// own (a guessed token matches no row), and then it gives the lock
	// back at once.
	var activity Activity
	if window := s.activityWindow(limitFailedConfirms); window > 0 {
		tx.ReadActivity(caller.Org, caller.Principal, window, &activity)
	}
	c, acct, now, err := tx.LockByToken(ctx, caller.Org, caller.Principal, lookupKey(req.ConfirmToken))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return redemption{}, fmt.Errorf("lock confirmation: %w", err)
	}
	if limited := s.checkRate(activity, limitFailedConfirms); limited != nil {
		return redemption{outcome: limited}, nil
	}
	if errors.Is(err, ErrNotFound) {
		rejected := s.event(caller, req.Operation, EventTokenRejected, "", "invalid")
		return redemption{outcome: errTokenInvalid()}, tx.Record(ctx, Record{Events: []AuditEvent{rejected}})
	}
	s.at(ctx, StepConsume, &c)
	if sameRequest(c, req) {
		switch c.Status {
		case StatusExecuted:
			return redemption{result: replayOf(c, acct)}, nil
		case StatusExecuting:
			r, err := s.settle(ctx, tx, caller, c, acct, now)
			r.recoveryPoint = true
			return r, settledLater(err)
		}
	}
	if s.approvalLapsed(c, now) { // fail closed (approval.go)
		return redemption{outcome: errApprovalRejected(Confirmation{Failure: reasonExpired})},
			s.expireApproval(ctx, tx, caller.RequestID, c)
	}
	if r := s.checkRedeemable(c, acct, req, now); r != nil {
		if r.reason == "" { // waiting for approval: nothing to record
			return redemption{outcome: r.err}, nil
		}
		rejected := s.event(caller, c.Operation, EventTokenRejected, c.ID, r.reason)
		return redemption{outcome: r.err}, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: r.status, Events: []AuditEvent{rejected}})
	}
	if acct.Unsettled {
		return redemption{outcome: errUnsettled()}, nil
	}
	if caller.mandate != "" { // a first call a mandate covered (mandate.go)
		if notCovered, err := s.spendMandate(ctx, tx, caller, c); notCovered != nil || err != nil {
			return redemption{outcome: notCovered}, err
		}
	}
	if refused, err := s.policyAtExecution(ctx, tx, caller, &c, acct.Policy, now); refused != nil || err != nil {
		return redemption{outcome: refused}, err
	}
	state, drift, err := s.checkAtProvider(ctx, tx, caller, c, acct)
	if drift != nil || err != nil {
		return redemption{outcome: drift}, err
	}
	c.Consent = consentFor(c, caller, s.people.isAgent(acct.Policy, caller)) // how the person agreed (consent.go)
	return s.execute(ctx, tx, caller, c, state.Schedule)
}

// checkAtProvider is the last check before the change is sent: the
// subscription at the provider must still be what the quote assumed (its
// price, one item of the quoted quantity, its status, period and scheduled
// change), because a change made in Stripe's dashboard or by another tool
// reaches billingd only when a webhook does, if ever. Otherwise the token is revoked as drift, billingd
// records the subscription as the provider has it, and nothing is sent. The
// writes held back so far stay held: the audit chain's head is not locked
// while the provider answers.
func (s *Service) checkAtProvider(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account) (
	state ProviderSubscription, refused error, err error) {
	s.at(ctx, StepCheckAtProvider, &c)
	readCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	state, err = s.payments.ReadSubscription(readCtx, acct.Subscription.StripeSubscriptionID)
	if err != nil {
		return state, providerError("read subscription before the change", err), nil
	}
	if s.quoteHolds(c, acct.Subscription, state) {
		return state, nil, nil
	}
	s.log.WarnContext(ctx, "subscription changed at the provider since the quote; token revoked", "confirmation_id", c.ID,
		"org", c.Org, "price", state.PriceID, "status", state.Status)
	if err := s.revokeAsDrift(ctx, tx, caller, c); err != nil {
		return state, nil, err
	}
	if _, err := s.recordProviderState(ctx, tx, acct, state, time.Time{}); err != nil {
		return state, nil, err
	}
	return state, Errorf(CodeTokenMismatch, "%s", msgChangedAtProvider), nil
}

// revokeAsDrift records c revoked because the subscription is no longer
// the one its summary described (TOKEN_REVOKED, reason drift).
func (s *Service) revokeAsDrift(ctx context.Context, tx Tx, caller Caller, c Confirmation) error {
	revoked := s.event(caller, c.Operation, EventTokenRevoked, c.ID, "drift")
	return tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusRevoked, Events: []AuditEvent{revoked}})
}

// quoteHolds reports whether the provider's subscription is still the one
// the quote of c was made from (billingd's copy, sub, is: termsHold),
// its scheduled change included (scheduleHolds).
func (s *Service) quoteHolds(c Confirmation, sub Subscription, state ProviderSubscription) bool {
	return state.PriceID == c.Terms.FromPriceID && state.ItemID == sub.StripeItemID &&
		state.Items == 1 && state.Quantity == seats(c.Terms.Quantity) && state.Status == sub.Status &&
		state.CancelAtPeriodEnd == sub.CancelAtPeriodEnd &&
		state.CurrentPeriodEnd.Equal(sub.CurrentPeriodEnd) && s.scheduleHolds(c.Terms, sub, state)
}

const msgChangedAtProvider = "the subscription was changed at the payment provider since the summary was made " +
	"(nothing was sent); the token is now void: start again with a first call"

// execute is the money path of a second call whose every check passed:
// the recovery point, then the provider request and its record. Once the
// recovery point is saved, nothing depends on the client any more.
// attached is the schedule the provider's subscription has (released
// before the change: PlanChange.Attached).
func (s *Service) execute(ctx context.Context, tx Tx, caller Caller, c Confirmation, attached *ProviderSchedule) (redemption, error) {
	validated := s.event(caller, c.Operation, EventTokenValidated, c.ID, "")
	if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Events: []AuditEvent{validated}}); err != nil {
		return redemption{}, err
	}
	ctx, cancel := s.afterSideEffect(ctx)
	defer cancel()
	attempt := c.Attempt
	s.at(ctx, StepRecoveryPoint, &c)
	c, acct, now, err := tx.SaveRecoveryPoint(ctx, c.ID, attempt, c.Consent)
	if err != nil {
		return redemption{}, fmt.Errorf("save recovery point: %w", err)
	}
	r, err := s.afterRecoveryPoint(ctx, tx, caller, c, acct, now, attempt, attached)
	r.recoveryPoint = true
	return r, settledLater(err)
}

// afterRecoveryPoint sends c's change under attempt, unless the locks,
// released for the recovery point's commit and taken again (now is the
// time they were), show that someone else settled it meanwhile, that
// they took too long to get back, or that a webhook recorded a change of
// the subscription (the terms no longer hold: nothing is sent).
func (s *Service) afterRecoveryPoint(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	attempt int, attached *ProviderSchedule) (redemption, error) {
	if c.Status != StatusExecuting || c.Attempt != attempt {
		return s.answerSettled(c, acct), nil
	}
	if now.Sub(c.AttemptedAt) > s.execTimeout {
		// The locks took that long to get back: too late to send, or
		// attemptOver could no longer bound when the request ends. The
		// settler sends it under the same key while the consent holds.
		return redemption{outcome: errOutcomeUnknown(nil)}, nil
	}
	message := ""
	switch {
	case !s.termsHoldForResend(c.Terms, acct.Subscription, attempt > 0):
		message = msgSubscriptionChanged
	case s.datePassed(c.Terms, now):
		message = msgRenewalDue
	}
	if message != "" {
		return redemption{outcome: Errorf(CodeTokenMismatch, "%s", message)}, s.revokeAsDrift(ctx, tx, caller, c)
	}
	if attempt > 0 {
		// A resend the settler decided on (consentHolds) before its
		// recovery point: decided again, as the relock read it. An
		// earlier attempt may have made the first step (a release), so a
		// consent that lapsed meanwhile is a change not made, with what it
		// released put back (recordNotMade).
		holds, err := s.consentHolds(ctx, tx, c, acct, now)
		if err != nil {
			return redemption{}, err
		}
		if !holds {
			state, err := s.readBack(ctx, acct)
			if err != nil {
				return redemption{outcome: errOutcomeUnknown(nil)}, nil // settled on a later round
			}
			return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
		}
	} else if refused, err := s.policyAgainBeforeSend(ctx, tx, caller, &c, acct, now); refused != nil || err != nil {
		return redemption{outcome: refused}, err
	}
	s.at(ctx, StepSend, &c)
	return s.send(ctx, tx, caller, c, acct, now, attached, attempt == 0)
}

// settledLater marks an error that came after a recovery point: the
// confirmation is executing and is settled whatever happens to this step,
// so the caller must be told the outcome is unknown, never that nothing
// was changed.
func settledLater(err error) error {
	if err == nil || errors.Is(err, ErrRecoveryPointSaved) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRecoveryPointSaved, err)
}

// answerSettled answers from a confirmation someone else moved on.
func (s *Service) answerSettled(c Confirmation, acct Account) redemption {
	switch c.Status {
	case StatusExecuted:
		return redemption{result: replayOf(c, acct)}
	case StatusFailed:
		return redemption{outcome: errFailed(c)}
	default:
		return redemption{outcome: errOutcomeUnknown(nil)}
	}
}

// errOutcomeUnknown: the change was sent (or is about to be) and the
// provider did not say whether it made it. billingd settles it on its own;
// the caller that holds the token may ask again with it (one that never
// held it is told otherwise: answerFor).
func errOutcomeUnknown(cause error) *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 2 * time.Second, Err: cause, outcomeUnknown: true,
		Message: msgOutcomeUnknown + "Retry the same call with the same token shortly to learn the outcome; do not start a new change"}
}

const msgOutcomeUnknown = "the payment provider did not confirm the change yet; billingd is finding out whether it was made. "

// errUnsettled: another change of the subscription is being settled.
func errUnsettled() *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 5 * time.Second,
		Message: "a previous change of this subscription is still being settled with the payment provider; retry shortly"}
}

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
	if !wellFormedToken(req.ConfirmToken) {
		// Never a token billingd issued: answer like any unknown token,
		// once the rate limit allows.
		if err := s.readAndCheckRate(ctx, caller, limitFailedConfirms); err != nil {
			return ChangeResult{}, err
		}
		return ChangeResult{}, s.rejectUnknown(ctx, caller, req.Operation)
	}
	var r redemption
	err := s.inExecutionTx(ctx, func(tx Tx) (err error) {
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
		return ChangeResult{}, s.rolledBack(req, err)
	}
	return r.result, r.outcome
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
	c, acct, now, err := tx.LockByToken(ctx, caller.Org, caller.Principal, hashToken(req.ConfirmToken))
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
			r, err := s.settle(ctx, tx, caller, c, acct, now, req.TokenWithheld)
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
	return s.execute(ctx, tx, caller, c, state.Schedule, req.TokenWithheld)
}

// sameRequest reports whether a second call repeats the one c was issued
// for: only then may it see c's outcome.
func sameRequest(c Confirmation, req ChangeRequest) bool {
	return asksFor(req, c.Operation, c.Terms.ToPlan, c.Terms.AtPeriodEnd, keepsPlan(c.Terms))
}

// Asks reports whether req asks for the change the proposal p states, by
// the rule a second call must meet (sameRequest): a transport holding only
// the proposal (MCP's sealed request state) checks a later call with it.
func (p ChangeResult) Asks(req ChangeRequest) bool {
	d := p.Details
	return d != nil && asksFor(req, p.Operation, d.To, d.At == AtPeriodEnd, d.From == d.To && d.CancelsScheduledChange != nil)
}

// asksFor is the one rule: the same operation, plan and time. Keeping the
// plan is the same request whatever "at" it names: it cancels the
// scheduled change now.
func asksFor(req ChangeRequest, op Operation, to string, atPeriodEnd, keep bool) bool {
	return req.Operation == op && req.To == to && (req.atPeriodEnd() == atPeriodEnd || keep)
}

// replayOf is the answer to the owner repeating an executed second call.
func replayOf(c Confirmation, acct Account) ChangeResult {
	r := ChangeResult{OK: true, Subscription: viewOf(acct.Subscription)}
	if c.Result != nil {
		r = *c.Result
	}
	r.Replayed = true
	return r
}

// policyAtExecution decides the org's policy again, as it is now, for the
// change c describes: a change that now needs approval waits for it, one
// that is now denied (by a rule or the daily limit) is revoked. The caller
// counts as an agent if it is one now or was one when the token was issued.
// Everything is read and recorded through tx; a failure to read rolls back
// and leaves the token as it was. A verification made by the caller's
// step-up token is recorded and set on c, whose receipt then carries it; now
// is the transaction's database time.
func (s *Service) policyAtExecution(ctx context.Context, tx Tx, caller Caller, c *Confirmation, p Policy, now time.Time) (refused error, err error) {
	if !c.Agent && s.people.isAgent(p, caller) {
		// Redeemed by an agent: an agent's change from now on, also for
		// deciding later whether it may be sent again (consentHolds).
		c.Agent = true
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Agent: true}); err != nil {
			return nil, err
		}
	}
	action, reason, err := s.policyNow(ctx, tx, *c, p, false)
	if err != nil {
		return nil, err
	}
	switch {
	case action == ActionDeny:
		revoked := s.event(caller, c.Operation, EventTokenRevoked, c.ID, "policy")
		denied := s.event(caller, c.Operation, EventOperationDenied, c.ID, reason)
		return errDenied(reason), tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusInvalidated,
			Events: []AuditEvent{revoked, denied}})
	case action == ActionApprove && needsMoreApprovals(*c, p.approvalsRequired(factsOf(*c, false))):
		// The policy came to ask for approval, or for more approvers,
		// after the token was issued (approval.go).
		return s.raiseApprovals(ctx, tx, c, p.approvalsRequired(factsOf(*c, false)))
	case action == ActionVerify || c.VerifyRequired:
		// Asked for at issue, or now: the stricter holds (verify.go).
		return s.requireVerification(ctx, tx, caller, c, now)
	}
	return nil, nil
}

// policyNow is the org's whole policy, as it is now, applied to the change
// c describes: its rules and its daily limit.
func (s *Service) policyNow(ctx context.Context, tx Tx, c Confirmation, p Policy, agentNow bool) (Action, string, error) {
	action, reason := ruling(p, factsOf(c, agentNow))
	if action == ActionDeny {
		return action, reason, nil
	}
	over, err := overDailyLimit(ctx, tx, p, c.Org)
	if err != nil {
		return "", "", err
	}
	if over {
		return ActionDeny, reasonDailyLimit, nil
	}
	return action, "", nil
}

// factsOf are the facts the policy decides c's change on; an agent's if
// it was issued to or redeemed by one, or agentNow.
func factsOf(c Confirmation, agentNow bool) changeFacts {
	return changeFacts{op: c.Operation, to: c.Terms.ToPlan, amountDueCents: c.Terms.AmountDueCents,
		agent: c.Agent || agentNow}
}

// checkAtProvider is the last check before the change is sent: the
// subscription at the provider must still be what the quote assumed (its
// price, one item of quantity one, its status, period and scheduled
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
		state.Items == 1 && state.Quantity == 1 && state.Status == sub.Status &&
		state.CurrentPeriodEnd.Equal(sub.CurrentPeriodEnd) && s.scheduleHolds(c.Terms, sub, state)
}

const msgChangedAtProvider = "the subscription was changed at the payment provider since the summary was made " +
	"(nothing was sent); the token is now void: start again with a first call"

// execute is the money path of a second call whose every check passed:
// the recovery point, then the provider request and its record. Once the
// recovery point is saved, nothing depends on the client any more.
// attached is the schedule the provider's subscription has (released
// before the change: PlanChange.Attached).
func (s *Service) execute(ctx context.Context, tx Tx, caller Caller, c Confirmation, attached *ProviderSchedule, withheld bool) (redemption, error) {
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
	r, err := s.afterRecoveryPoint(ctx, tx, caller, c, acct, now, attempt, attached, withheld)
	r.recoveryPoint = true
	return r, settledLater(err)
}

// afterRecoveryPoint sends c's change under attempt, unless the locks,
// released for the recovery point's commit and taken again (now is the
// time they were), show that someone else settled it meanwhile, that
// they took too long to get back, or that a webhook recorded a change of
// the subscription (the terms no longer hold: nothing is sent).
func (s *Service) afterRecoveryPoint(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	attempt int, attached *ProviderSchedule, withheld bool) (redemption, error) {
	if c.Status != StatusExecuting || c.Attempt != attempt {
		return s.answerSettled(c, acct, withheld), nil
	}
	if now.Sub(c.AttemptedAt) > s.execTimeout {
		// The locks took that long to get back: too late to send, or
		// attemptOver could no longer bound when the request ends. The
		// settler sends it under the same key while the consent holds.
		return redemption{outcome: errOutcomeUnknown(nil, withheld)}, nil
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
				return redemption{outcome: errOutcomeUnknown(nil, withheld)}, nil // settled on a later round
			}
			return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
		}
	} else if refused, err := s.policyAgainBeforeSend(ctx, tx, caller, &c, acct, now); refused != nil || err != nil {
		return redemption{outcome: refused}, err
	}
	s.at(ctx, StepSend, &c)
	return s.send(ctx, tx, caller, c, acct, now, attached, attempt == 0, withheld)
}

// policyAgainBeforeSend decides the org's policy once more, as the
// relock read it, right before the request leaves: the policy may have
// turned while the change was checked at the provider and the recovery
// point committed, and a deny saved by then must stop it. (Saving a policy
// takes no lock a change holds across Stripe, so an admin never waits for
// Stripe: a policy saved while the request is on its way applies from the
// next decision on.) A change that now needs approval or verification
// goes back to pending, as before its second call (nothing was sent); one
// now denied is revoked.
func (s *Service) policyAgainBeforeSend(ctx context.Context, tx Tx, caller Caller, c *Confirmation, acct Account,
	now time.Time) (refused error, err error) {
	refused, err = s.policyAtExecution(ctx, tx, caller, c, acct.Policy, now)
	if err != nil || refused == nil || ErrorCode(refused) == CodeOperationDenied {
		return refused, err
	}
	return refused, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusPending})
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
func (s *Service) answerSettled(c Confirmation, acct Account, withheld bool) redemption {
	switch c.Status {
	case StatusExecuted:
		return redemption{result: replayOf(c, acct)}
	case StatusFailed:
		return redemption{outcome: errFailed(c)}
	default:
		return redemption{outcome: errOutcomeUnknown(nil, withheld)}
	}
}

// send is the provider request for c under its current attempt's key, and
// the record of its outcome. auditUnknown: an unknown outcome is audited
// (once per confirmation, when it first becomes unknown).
func (s *Service) send(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	attached *ProviderSchedule, auditUnknown, withheld bool) (redemption, error) {
	applied, err := s.apply(ctx, c, acct, attached)
	s.at(ctx, StepRecord, &c)
	return s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err, auditUnknown, withheld)
}

// afterSideEffect is the context for the steps from the recovery point on:
// detached from the client, so a client that hangs up changes nothing about
// what is sent and recorded, and bounded, so a row lock is never held
// forever. It allows for two requests and a read-back (settling) plus the
// writes.
func (s *Service) afterSideEffect(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*s.execTimeout+recordTimeout)
}

// recordTimeout bounds the writes that record a provider outcome.
const recordTimeout = 10 * time.Second

// apply sends c's change to the provider under the idempotency key of c's
// current attempt, releasing the attached schedule first.
func (s *Service) apply(ctx context.Context, c Confirmation, acct Account, attached *ProviderSchedule) (AppliedChange, error) {
	change := planChangeFor(acct, c.Terms, c.Operation)
	change.ConfirmationID, change.Attached = c.ID, attached
	callCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	return s.payments.ApplyPlanChange(callCtx, change, idempotencyKey(c))
}

// recordAttempt records the outcome of a provider request for c; now is
// the transaction's database time.
func (s *Service) recordAttempt(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	applied AppliedChange, err error, auditUnknown, withheld bool) (redemption, error) {
	switch {
	case err == nil && keepsPlan(c.Terms) && applied.PriceID != "" && applied.PriceID != c.Terms.FromPriceID:
		// The subscription is not on the plan kept: the renewal made the
		// scheduled change before the release (renewed_first), or its
		// price was changed elsewhere. The plan was not kept.
		state, rerr := s.readBack(ctx, acct)
		if rerr != nil {
			return redemption{}, rerr
		}
		return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
	case err == nil:
		return s.recordExecuted(ctx, tx, caller, c, acct.Subscription, now, applied)
	case errors.Is(err, ErrRateLimited) && auditUnknown:
		// The second call's first request: Stripe refused it before
		// executing it and kept nothing under its key: nothing was made.
		// The confirmation goes back to pending, as before the second
		// call: its token stays redeemable, and nothing is sent unless the
		// caller asks again. (A resend or a probe rate-limited says
		// nothing of an earlier request under the key: unknown, below.)
		limited := s.event(caller, c.Operation, EventOperationFailed, c.ID, "rate_limited")
		limited.Outcome = "retryable"
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusPending, Events: []AuditEvent{limited}}); err != nil {
			return redemption{}, err
		}
		outcome, err := s.afterRefusal(ctx, tx, c, acct, now, errProviderRateLimited(err))
		return redemption{outcome: outcome}, err
	case !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrRateLimited):
		failure := providerError("apply plan change", err)
		reason := string(ErrorCode(failure))
		failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, reason)
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed,
			Failure: reason, Attempt: &c.Attempt, Events: []AuditEvent{failed}}); err != nil {
			return redemption{}, err
		}
		outcome, err := s.afterRefusal(ctx, tx, c, acct, now, failure)
		return redemption{outcome: outcome}, err
	default:
		s.log.WarnContext(ctx, "plan change outcome unknown; settling", "confirmation_id", c.ID, "attempt", c.Attempt, "err", err)
		var events []AuditEvent
		if auditUnknown {
			unknown := s.event(caller, c.Operation, EventOperationFailed, c.ID, reasonOutcomeUnknown)
			unknown.Outcome = "unknown"
			events = append(events, unknown)
		}
		return redemption{outcome: errOutcomeUnknown(err, withheld)}, tx.Record(ctx, Record{ConfirmationID: c.ID,
			Status: StatusExecuting, Attempt: &c.Attempt, Events: events})
	}
}

// recordExecuted records c as executed: the new subscription, the answer to
// replay, OPERATION_EXECUTED and the signed receipt, which the answer (and so
// every replay) carries. The amount charged is the one the provider
// invoiced, with the quote beside it when they differ. now, the
// transaction's database time, is the receipt's executed_at (and the
// confirmation's finished_at).
func (s *Service) recordExecuted(ctx context.Context, tx Tx, caller Caller, c Confirmation, sub Subscription,
	now time.Time, applied AppliedChange) (redemption, error) {
	sub = subscriptionAfter(c, sub, applied)
	sub.SyncedAt = now
	result := ChangeResult{OK: true, Subscription: viewOf(sub), Charged: chargedFor(c, applied)}
	if k := c.Consent; k != nil && k.Method == ConsentMandate {
		result.MandateID = k.MandateID
	}
	if result.Notice = chargedNotice(result.Charged); result.Notice != "" {
		s.log.WarnContext(ctx, "invoiced amount differs from the quote or is unknown", "confirmation_id", c.ID,
			"quoted", result.Charged.QuotedAmountDueNowCents, "invoice_id", result.Charged.InvoiceID)
	}
	// The change was made: a receipt that cannot be signed must not stop it
	// being recorded.
	rcpt, err := s.receiptFor(c, sub, now, result.Charged)
	if err != nil {
		s.log.ErrorContext(ctx, "executed change recorded without a receipt", "confirmation_id", c.ID, "err", err)
	}
	if rcpt != nil {
		result.Receipt = rcpt.Receipt
	}
	executed := s.event(caller, c.Operation, EventOperationExecuted, c.ID, "")
	executed.Consent = consentOf(c)
	err = tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusExecuted, Subscription: &sub,
		Attempt: &c.Attempt, Result: &result, Receipt: rcpt, Events: []AuditEvent{executed}})
	return redemption{result: result}, err
}

// idempotencyKey is derived from the confirmation and its attempt, so every
// retry of one attempt, including one after a crash, is the same request to
// Stripe, and a new attempt (made only once the provider showed that the
// previous one changed nothing) is a new request.
func idempotencyKey(c Confirmation) string {
	if c.Attempt == 0 {
		return "billingd-" + c.ID
	}
	return fmt.Sprintf("billingd-%s-%d", c.ID, c.Attempt)
}

// rolledBack answers a second call whose transaction did not commit: the
// database failed. Before the recovery point nothing was sent and the token
// is as it was; after it, the confirmation is executing and is settled by
// the owner's retry or any replica's settler, with the same idempotency key.
func (s *Service) rolledBack(req ChangeRequest, err error) error {
	if errors.Is(err, ErrRecoveryPointSaved) {
		return errOutcomeUnknown(err, req.TokenWithheld)
	}
	answer := storeError("confirm", err)
	if errors.Is(err, ErrUnavailable) && !req.TokenWithheld {
		// Not "nothing was changed": this call may repeat one whose change
		// an earlier call sent (the owner's retry of an executing one), and
		// the database that would tell is what failed.
		answer = wrapErr(CodeUpstreamUnavailable, "the database is unavailable: retry with the same token shortly", err)
	}
	return answer
}

// rejectUnknown audits a second call whose token does not exist.
func (s *Service) rejectUnknown(ctx context.Context, caller Caller, op Operation) error {
	if err := s.store.AppendAudit(ctx, s.event(caller, op, EventTokenRejected, "", "invalid")); err != nil {
		return storeError("audit rejection", err)
	}
	return errTokenInvalid()
}

func errTokenInvalid() *Error {
	return Errorf(CodeTokenInvalid, "the confirmation token is not valid: start again with a first call")
}

func errApprovalPending() *Error {
	return &Error{Code: CodeApprovalPending, RetryAfter: 5 * time.Second,
		Message: "waiting for an approver; retry the same call after the change is approved"}
}

// errOutcomeUnknown: the change was sent (or is about to be) and the
// provider did not say whether it made it. billingd settles it on its own;
// only a caller that holds the token can ask again with it.
func errOutcomeUnknown(cause error, withheld bool) *Error {
	next := "Retry the same call with the same token shortly to learn the outcome; do not start a new change"
	if withheld {
		next = "billingd settles it on its own within seconds: read the subscription (get_subscription, " +
			"GET /api/billing/subscription) shortly to learn the outcome; do not start a new change"
	}
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 2 * time.Second, Err: cause,
		Message: "the payment provider did not confirm the change yet; billingd is finding out whether it was made. " + next}
}

// errUnsettled: another change of the subscription is being settled.
func errUnsettled() *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 5 * time.Second,
		Message: "a previous change of this subscription is still being settled with the payment provider; retry shortly"}
}

// rejection is why a confirmation cannot be redeemed, and what that does to it.
type rejection struct {
	err    *Error
	reason string // the audit reason: expired, mismatch, invalid, used
	status Status // the confirmation's new status; "" leaves it alone
}

// checkRedeemable holds the rules of a second call, in order: a finished
// confirmation is invalid, an expired one expired (by the database clock plus
// the allowed skew), and one whose operation, parameters or terms no longer
// match is a mismatch that voids it. (The owner repeating the exact call of
// an executed or executing confirmation is answered before: replay, settle.)
func (s *Service) checkRedeemable(c Confirmation, acct Account, req ChangeRequest, now time.Time) *rejection {
	switch c.Status {
	case StatusPending:
	case StatusExecuted, StatusExecuting:
		return &rejection{err: errTokenInvalid(), reason: "used"}
	case StatusFailed:
		return &rejection{err: errFailed(c), reason: "used"}
	case StatusExpired:
		return &rejection{err: errTokenExpired(), reason: "expired"}
	case StatusRevoked:
		return &rejection{err: Errorf(CodeTokenMismatch, "%s", msgSubscriptionChanged), reason: "mismatch"}
	case StatusRejected:
		return &rejection{err: errApprovalRejected(c), reason: "invalid"}
	default: // superseded, cancelled, invalidated
		return &rejection{err: errTokenInvalid(), reason: "invalid"}
	}
	if now.After(c.ExpiresAt.Add(s.skew)) {
		return &rejection{err: errTokenExpired(), reason: "expired", status: StatusExpired}
	}
	if !sameRequest(c, req) {
		return mismatch("the request differs from the one the token was issued for; the token is now void")
	}
	if !s.termsHold(c.Terms, acct.Subscription) {
		return mismatch(msgSubscriptionChanged)
	}
	if s.datePassed(c.Terms, now) {
		return mismatch(msgRenewalDue)
	}
	if c.Approval == ApprovalPending {
		return &rejection{err: errApprovalPending()}
	}
	return nil
}

// termsHold reports whether everything the summary stated is still true.
func (s *Service) termsHold(t Terms, sub Subscription) bool {
	from, okFrom := s.catalog.Plan(t.FromPlan)
	to, okTo := s.catalog.Plan(t.ToPlan)
	return okFrom && okTo &&
		sub.Plan == t.FromPlan && sub.Version == t.SubscriptionVer &&
		from.StripePriceID == t.FromPriceID && from.AmountCents == t.FromAmountCents &&
		to.StripePriceID == t.ToPriceID && to.AmountCents == t.ToAmountCents &&
		to.Currency == t.Currency && t.Livemode == s.livemode
}

const msgSubscriptionChanged = "the subscription or prices changed since the summary was made; the token is now void"

const msgRenewalDue = "the date the summary states has come or is minutes away: the payment provider is renewing " +
	"the subscription, which the change could no longer precede (nothing was sent); the token is now void: start " +
	"again with a first call in a few minutes"

func mismatch(message string) *rejection {
	return &rejection{err: Errorf(CodeTokenMismatch, "%s", message), reason: "mismatch", status: StatusInvalidated}
}

// errFailed is the answer to a token whose change was definitely not made.
func errFailed(c Confirmation) *Error {
	switch c.Failure {
	case reasonNotApplied:
		return Errorf(CodeTokenInvalid, "the change was not made and nothing was charged: billingd could not "+
			"complete it while the consent still held; start again with a first call")
	case reasonRenewedFirst:
		return Errorf(CodeTokenInvalid, "the plan was not kept: the scheduled change took effect at the renewal "+
			"before it could be cancelled; read the subscription and start again with a first call if needed")
	}
	return errTokenInvalid()
}

func errTokenExpired() *Error {
	return Errorf(CodeTokenExpired, "the confirmation token has expired: start again with a first call")
}

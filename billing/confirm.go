package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// confirm is the second call: one transaction locks the confirmation and the
// subscription, checks every rule, executes the change at the provider and
// records the outcome. Refusals are recorded and committed too, so that a
// mismatching call really voids its token and leaves an audit trail. An
// unknown outcome is committed as well (the confirmation is then executing)
// and settled later; only a failure of the database itself rolls back.
func (s *Service) confirm(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	// The rate limit is read before the transaction, not with its lock: a
	// caller over it must not wait for (or hold) a row lock to be told so.
	if err := s.readAndCheckRate(ctx, caller, limitFailedConfirms); err != nil {
		return ChangeResult{}, err
	}
	if !wellFormedToken(req.ConfirmToken) {
		// Never a token billingd issued: answer like any unknown token.
		return ChangeResult{}, s.rejectUnknown(ctx, caller, req.Operation)
	}
	var r redemption
	err := s.store.InTx(ctx, func(tx Tx) (err error) {
		r, err = s.consume(ctx, tx, caller, req)
		return err
	})
	if err != nil {
		return ChangeResult{}, s.rolledBack(ctx, caller, r.attempted, err)
	}
	return r.result, r.outcome
}

// redemption is what a second call's transaction decided.
type redemption struct {
	result    ChangeResult
	outcome   error         // the error the caller gets once the transaction committed
	attempted *Confirmation // set once the provider was called
}

// consume is the step that uses a token up: the second call inside its
// transaction. It locks the confirmation and the subscription, checks every
// rule, executes and records. A returned error rolls the transaction back
// and leaves the token as it was; a refusal is an outcome, recorded and
// committed.
func (s *Service) consume(ctx context.Context, tx Tx, caller Caller, req ChangeRequest) (redemption, error) {
	c, acct, now, err := tx.LockByToken(ctx, caller.Org, caller.Principal, hashToken(req.ConfirmToken))
	if errors.Is(err, ErrNotFound) {
		rejected := s.event(caller, req.Operation, EventTokenRejected, "", "invalid")
		return redemption{outcome: errTokenInvalid()}, tx.Record(ctx, Record{Events: []AuditEvent{rejected}})
	}
	if err != nil {
		return redemption{}, fmt.Errorf("lock confirmation: %w", err)
	}
	if sameRequest(c, req) {
		switch c.Status {
		case StatusExecuted:
			return redemption{result: replayOf(c, acct)}, nil
		case StatusExecuting:
			return s.settle(ctx, tx, caller, c, acct, now)
		}
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
	if refused, err := s.policyAtExecution(ctx, tx, caller, &c, acct.Policy, now); refused != nil || err != nil {
		return redemption{outcome: refused}, err
	}
	return s.execute(ctx, tx, caller, c, acct, now)
}

// sameRequest reports whether a second call repeats the one c was issued
// for: only then may it see c's outcome.
func sameRequest(c Confirmation, req ChangeRequest) bool {
	return c.Operation == req.Operation && c.Terms.ToPlan == req.To
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
	facts := changeFacts{op: c.Operation, to: c.Terms.ToPlan, amountDueCents: c.Terms.AmountDueCents,
		agent: c.Agent || p.isAgent(caller)}
	action, reason := ruling(p, facts)
	if action != ActionDeny {
		over, err := overDailyLimit(ctx, tx, p, c.Org)
		if err != nil {
			return nil, err
		}
		if over {
			action, reason = ActionDeny, reasonDailyLimit
		}
	}
	switch {
	case action == ActionDeny:
		revoked := s.event(caller, c.Operation, EventTokenRevoked, c.ID, "policy")
		denied := s.event(caller, c.Operation, EventOperationDenied, c.ID, reason)
		return errDenied(reason), tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusInvalidated,
			Events: []AuditEvent{revoked, denied}})
	case action == ActionApprove && c.Approval == "":
		// The policy came to ask for approval after the token was issued.
		return errApprovalPending(), tx.Record(ctx, Record{ConfirmationID: c.ID,
			Approval: &ApprovalDecision{State: ApprovalPending}})
	case action == ActionVerify || c.VerifyRequired:
		// Asked for at issue, or now: the stricter holds (verify.go).
		return s.requireVerification(ctx, tx, caller, c, now)
	}
	return nil, nil
}

// execute calls the provider for a valid confirmation and records what
// happened: executed, failed (a definite refusal), or executing (the outcome
// is unknown and will be settled).
func (s *Service) execute(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time) (redemption, error) {
	if err := beforeProvider(ctx, tx); err != nil {
		return redemption{}, err
	}
	ctx, cancel := s.afterSideEffect(ctx)
	defer cancel()
	applied, err := s.apply(ctx, c, acct)
	validated := s.event(caller, c.Operation, EventTokenValidated, c.ID, "")
	r, err := s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err, validated)
	r.attempted = &c
	return r, err
}

// beforeProvider sends what the step wrote so far (a verification, say)
// before the provider is called: a write that fails then rolls the step back
// with nothing charged, rather than after the charge.
func beforeProvider(ctx context.Context, tx Tx) error {
	if err := tx.Flush(ctx); err != nil {
		return fmt.Errorf("write before the provider call: %w", err)
	}
	return nil
}

// afterSideEffect is the context for a provider call that may change the
// subscription and for recording its outcome: detached from the client, so
// a client that hangs up changes nothing about what is recorded, and
// bounded, so a row lock is never held forever. It allows for two requests
// and a read-back (settling) plus the writes.
func (s *Service) afterSideEffect(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*s.execTimeout+recordTimeout)
}

// recordTimeout bounds the writes that record a provider outcome.
const recordTimeout = 10 * time.Second

// apply sends c's change to the provider under the idempotency key of c's
// current attempt.
func (s *Service) apply(ctx context.Context, c Confirmation, acct Account) (AppliedChange, error) {
	// The price the person agreed to (Terms), not the catalog's: a retry of
	// the same key must be the same request even if the catalog changed.
	change := planChangeFor(acct, Plan{StripePriceID: c.Terms.ToPriceID}, c.Operation, c.Terms.ProrationDate)
	change.ConfirmationID = c.ID
	callCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	return s.payments.ApplyPlanChange(callCtx, change, idempotencyKey(c))
}

// recordAttempt records the outcome of a provider request for c, with the
// events given (TOKEN_VALIDATED on the first attempt); now is the
// transaction's database time.
func (s *Service) recordAttempt(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	applied AppliedChange, err error, events ...AuditEvent) (redemption, error) {
	switch {
	case err == nil:
		return s.recordExecuted(ctx, tx, caller, c, acct.Subscription, now, applied, events...)
	case !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded):
		failure := providerError("apply plan change", err)
		failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, string(ErrorCode(failure)))
		return redemption{outcome: failure}, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed,
			Attempt: &c.Attempt, Events: append(events, failed)})
	default:
		s.log.Warn("plan change outcome unknown; settling", "confirmation_id", c.ID, "attempt", c.Attempt, "err", err)
		if c.Status != StatusExecuting { // audited once, when the outcome becomes unknown
			unknown := s.event(caller, c.Operation, EventOperationFailed, c.ID, reasonOutcomeUnknown)
			unknown.Outcome = "unknown"
			events = append(events, unknown)
		}
		return redemption{outcome: errOutcomeUnknown(err)}, tx.Record(ctx, Record{ConfirmationID: c.ID,
			Status: StatusExecuting, Attempt: &c.Attempt, Events: events})
	}
}

// recordExecuted records c as executed: the new subscription, the answer to
// replay, OPERATION_EXECUTED and the signed receipt, which the answer (and so
// every replay) carries. now, the transaction's database time, is the
// receipt's executed_at (and the confirmation's finished_at).
func (s *Service) recordExecuted(ctx context.Context, tx Tx, caller Caller, c Confirmation, sub Subscription,
	now time.Time, applied AppliedChange, events ...AuditEvent) (redemption, error) {
	sub.Plan, sub.Status = c.Terms.ToPlan, applied.Status
	if !applied.CurrentPeriodEnd.IsZero() {
		sub.CurrentPeriodEnd = applied.CurrentPeriodEnd
	}
	if applied.ItemID != "" {
		sub.StripeItemID = applied.ItemID
	}
	result := ChangeResult{OK: true, Subscription: viewOf(sub)}
	// The change was made: a receipt that cannot be signed must not stop it
	// being recorded.
	rcpt, err := s.receiptFor(c, sub, now)
	if err != nil {
		s.log.Error("executed change recorded without a receipt", "confirmation_id", c.ID, "err", err)
	}
	if rcpt != nil {
		result.Receipt = rcpt.Receipt
	}
	executed := s.event(caller, c.Operation, EventOperationExecuted, c.ID, "")
	err = tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusExecuted, Subscription: &sub,
		Attempt: &c.Attempt, Result: &result, Receipt: rcpt, Events: append(events, executed)})
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
// database failed. If the provider was called, the confirmation is marked
// executing on its own so that, retried or not, it is settled (with the same
// idempotency key, so a change the provider made is not made twice, and no
// other change of the subscription runs meanwhile); the attempt is audited
// outside the rolled-back transaction so that it is not lost. (A crash at
// that moment leaves only the webhook to record the change.)
func (s *Service) rolledBack(ctx context.Context, caller Caller, c *Confirmation, err error) error {
	answer := storeError("confirm", err)
	if c == nil {
		return answer
	}
	if errors.Is(err, ErrUnavailable) {
		answer = wrapErr(CodeUpstreamUnavailable, "the change could not be completed; retry with the same token", err)
	}
	if markErr := s.store.MarkAttempted(context.WithoutCancel(ctx), c.ID); markErr != nil {
		s.log.Error("marking a rolled-back attempt executing failed", "confirmation_id", c.ID, "err", markErr)
	}
	ev := s.event(caller, c.Operation, EventOperationFailed, c.ID, string(ErrorCode(answer)))
	ev.Outcome = "retryable"
	if auditErr := s.store.AppendAudit(context.WithoutCancel(ctx), ev); auditErr != nil {
		s.log.Error("audit of a rolled-back confirmation failed", "confirmation_id", c.ID, "err", auditErr)
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

// errOutcomeUnknown: the provider did not say whether it made the change.
func errOutcomeUnknown(cause error) *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 2 * time.Second, Err: cause,
		Message: "the payment provider did not confirm the change yet; billingd is finding out whether it was made. " +
			"Retry the same call with the same token shortly; do not start a new change"}
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
	case StatusExecuted, StatusExecuting, StatusFailed:
		return &rejection{err: errTokenInvalid(), reason: "used"}
	case StatusExpired:
		return &rejection{err: errTokenExpired(), reason: "expired"}
	case StatusRevoked:
		return &rejection{err: Errorf(CodeTokenMismatch, "%s", msgSubscriptionChanged), reason: "mismatch"}
	case StatusRejected:
		return &rejection{err: Errorf(CodeApprovalRejected, "an approver rejected this change"), reason: "invalid"}
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

func mismatch(message string) *rejection {
	return &rejection{err: Errorf(CodeTokenMismatch, "%s", message), reason: "mismatch", status: StatusInvalidated}
}

func errTokenExpired() *Error {
	return Errorf(CodeTokenExpired, "the confirmation token has expired: start again with a first call")
}

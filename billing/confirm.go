package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// confirm is the second call: one transaction locks the confirmation and the
// subscription, checks every rule, executes the change at the provider and
// records the outcome. Rejections are recorded and committed too, so that a
// mismatching call really voids its token and leaves an audit trail.
func (s *Service) confirm(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	if err := s.checkRate(ctx, caller, limitFailedConfirms); err != nil {
		return ChangeResult{}, err
	}
	if !wellFormedToken(req.ConfirmToken) {
		// Never a token billingd issued: answer like any unknown token.
		return ChangeResult{}, s.rejectUnknown(ctx, caller, req.Operation)
	}
	var r redemption
	err := s.store.InTx(ctx, func(tx Tx) (err error) {
		r, err = s.redeem(ctx, tx, caller, req)
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

// redeem is the second call inside its transaction. A returned error rolls
// the transaction back; a refusal is an outcome, recorded and committed.
func (s *Service) redeem(ctx context.Context, tx Tx, caller Caller, req ChangeRequest) (redemption, error) {
	c, acct, now, err := tx.LockByToken(ctx, caller.Org, caller.Principal, hashToken(req.ConfirmToken))
	if errors.Is(err, ErrNotFound) {
		rejected := s.event(caller, req.Operation, EventTokenRejected, "", "invalid")
		return redemption{outcome: errTokenInvalid()}, tx.Record(ctx, Record{Events: []AuditEvent{rejected}})
	}
	if err != nil {
		return redemption{}, fmt.Errorf("lock confirmation: %w", err)
	}
	if r := s.checkRedeemable(c, acct, req, now); r != nil {
		if r.reason == "" { // waiting for approval: nothing to record
			return redemption{outcome: r.err}, nil
		}
		rejected := s.event(caller, c.Operation, EventTokenRejected, c.ID, r.reason)
		return redemption{outcome: r.err}, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: r.status, Events: []AuditEvent{rejected}})
	}
	if denied := s.recheckPolicy(ctx, caller, c, acct.Policy); denied != nil {
		return redemption{outcome: denied}, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusInvalidated})
	}
	result, outcome, err := s.execute(ctx, tx, caller, c, acct)
	return redemption{result: result, outcome: outcome, attempted: &c}, err
}

// execute calls the provider for a valid confirmation and records what
// happened. A definite refusal ends the confirmation as failed and is
// returned as outcome; an unknown outcome is returned as err, so that the
// transaction rolls back and the same token can be retried with the same
// idempotency key.
func (s *Service) execute(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account) (result ChangeResult, outcome, err error) {
	to, _ := s.catalog.Plan(c.Terms.ToPlan) // checkRedeemable made sure it exists
	change := planChangeFor(acct, to, c.Operation, c.Terms.ProrationDate)
	change.ConfirmationID = c.ID
	// The provider call must finish even if the client goes away (a half-sent
	// change would be left for a retry to discover), but never hold the row
	// lock longer than execTimeout.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.execTimeout)
	defer cancel()
	applied, err := s.payments.ApplyPlanChange(callCtx, change, idempotencyKey(c))
	validated := s.event(caller, c.Operation, EventTokenValidated, c.ID, "")
	if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		failure := providerError("apply plan change", err)
		failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, string(ErrorCode(failure)))
		return ChangeResult{}, failure, tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed,
			Events: []AuditEvent{validated, failed}})
	}
	if err != nil {
		return ChangeResult{}, nil, fmt.Errorf("apply plan change: %w: %w", ErrUnavailable, err)
	}
	sub := acct.Subscription
	sub.Plan, sub.Status, sub.CurrentPeriodEnd = to.ID, applied.Status, applied.CurrentPeriodEnd
	if applied.ItemID != "" {
		sub.StripeItemID = applied.ItemID
	}
	executed := s.event(caller, c.Operation, EventOperationExecuted, c.ID, "")
	err = tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusExecuted, Subscription: &sub,
		Events: []AuditEvent{validated, executed}})
	return ChangeResult{OK: true, Subscription: viewOf(sub)}, nil, err
}

// idempotencyKey is derived from the confirmation, so every attempt to
// execute it, including a retry after a crash, is the same request to Stripe.
func idempotencyKey(c Confirmation) string { return "billingd-" + c.ID }

// rolledBack answers a second call whose transaction did not commit. The
// token is still pending and may be retried; the attempt is audited outside
// the rolled-back transaction so that it is not lost.
func (s *Service) rolledBack(ctx context.Context, caller Caller, c *Confirmation, err error) error {
	answer := storeError("confirm", err)
	if c == nil {
		return answer
	}
	if errors.Is(err, ErrUnavailable) {
		answer = wrapErr(CodeUpstreamUnavailable, "the change could not be completed; retry with the same token", err)
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

// rejection is why a confirmation cannot be redeemed, and what that does to it.
type rejection struct {
	err    *Error
	reason string // the audit reason: expired, mismatch, invalid, used
	status Status // the confirmation's new status; "" leaves it alone
}

// checkRedeemable holds the rules of a second call, in order: a finished
// confirmation is invalid, an expired one expired (by the database clock plus
// the allowed skew), and one whose operation, parameters or terms no longer
// match is a mismatch that voids it.
func (s *Service) checkRedeemable(c Confirmation, acct Account, req ChangeRequest, now time.Time) *rejection {
	switch c.Status {
	case StatusPending:
	case StatusExecuted, StatusFailed:
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
	if c.Operation != req.Operation || c.Terms.ToPlan != req.To {
		return mismatch("the request differs from the one the token was issued for; the token is now void")
	}
	if !s.termsHold(c.Terms, acct.Subscription) {
		return mismatch(msgSubscriptionChanged)
	}
	if c.Approval == ApprovalPending {
		return &rejection{err: &Error{Code: CodeApprovalPending, RetryAfter: 5 * time.Second,
			Message: "waiting for an approver; retry the same call after the change is approved"}}
	}
	return nil
}

// recheckPolicy applies the org's policy as it is now: a change the policy
// came to deny, or one over the daily limit, does not execute.
func (s *Service) recheckPolicy(ctx context.Context, caller Caller, c Confirmation, p Policy) error {
	facts := changeFacts{op: c.Operation, to: c.Terms.ToPlan, amountDueCents: c.Terms.AmountDueCents, agent: p.isAgent(caller)}
	if action, rule := p.decide(facts); action == ActionDeny {
		return s.deny(ctx, caller, c.Operation, c.ID, "policy rule "+rule)
	}
	return s.checkDailyLimit(ctx, caller, p, c.Operation, c.ID)
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

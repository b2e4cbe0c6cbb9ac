package billing

import (
	"errors"
	"time"
)

// The rules of a second call: whether it asks for what its token was issued
// for (sameRequest), whether the token can still be redeemed
// (checkRedeemable), and what the caller is told when it cannot or when
// its transaction failed (answerFor, rolledBack). The steps that apply
// them are in confirm.go.

// sameRequest reports whether a second call repeats the one c was issued
// for: only then may it see c's outcome.
func sameRequest(c Confirmation, req ChangeRequest) bool {
	t := c.Terms
	return asksFor(req, c.Operation, t.ToPlan, t.seatsTo(), t.AtPeriodEnd || t.Cancellation == CancelAtPeriodEnd, keepsPlan(t)) &&
		req.Reason == t.CancelReason && req.Comment == t.CancelComment
}

// Asks reports whether req asks for the change the proposal p states, by
// the rule a second call must meet (sameRequest): a transport holding only
// the proposal (MCP's sealed request state) checks a later call with it.
func (p ChangeResult) Asks(req ChangeRequest) bool {
	d := p.Details
	return d != nil && asksFor(req, p.Operation, d.To, d.QuantityTo, d.At == AtPeriodEnd || d.Cancellation == CancelAtPeriodEnd,
		d.From == d.To && d.QuantityFrom == d.QuantityTo && d.Cancellation == "" && d.CancelsScheduledChange != nil) &&
		req.Reason == d.CancelReason && req.Comment == d.CancelComment
}

// asksFor is the one rule: the same operation, naming the same plan or
// seats (as the operation reads its request), and time. Keeping the plan
// is the same request whatever "at" it names: it cancels the scheduled
// change now.
func asksFor(req ChangeRequest, op Operation, to string, seats int64, atPeriodEnd, keep bool) bool {
	o, ok := operationOf(op)
	if !ok || req.Operation != op {
		return false
	}
	wantTo, wantQuantity := o.fields(to, seats)
	return req.To == wantTo && req.Quantity == wantQuantity && (req.atPeriodEnd() == atPeriodEnd || keep)
}

// requestOf is the request c was issued for (without its token).
func requestOf(c Confirmation) ChangeRequest {
	req := ChangeRequest{Operation: c.Operation}
	t := c.Terms
	if o, ok := operationOf(c.Operation); ok {
		req.To, req.Quantity = o.fields(t.ToPlan, t.seatsTo())
	}
	req.At, req.Reason, req.Comment = atOf(t.AtPeriodEnd, t.Cancellation), t.CancelReason, t.CancelComment
	return req
}

// SecondCall is the second call of the proposal p, made for its caller by
// a transport that showed the person the summary itself (an MCP
// elicitation): the fields p's operation asks with, and the token, which
// the caller never held.
func (p ChangeResult) SecondCall() ChangeRequest {
	req := ChangeRequest{Operation: p.Operation, ConfirmToken: p.ConfirmToken, TokenWithheld: true}
	if d := p.Details; d != nil {
		if o, ok := operationOf(p.Operation); ok {
			req.To, req.Quantity = o.fields(d.To, d.QuantityTo)
		}
		req.At, req.Reason, req.Comment = atOf(d.At == AtPeriodEnd, d.Cancellation), d.CancelReason, d.CancelComment
	}
	return req
}

// atOf is the "at" a request names: period_end for a change scheduled for
// the period's end or a cancellation then, now for a cancellation now
// (which must say so), else nothing.
func atOf(atPeriodEnd bool, c Cancellation) string {
	switch {
	case atPeriodEnd || c == CancelAtPeriodEnd:
		return AtPeriodEnd
	case c == CancelNow:
		return AtNow
	}
	return ""
}

// replayOf is the answer to the owner repeating an executed second call.
func replayOf(c Confirmation, acct Account) ChangeResult {
	r := ChangeResult{OK: true, Subscription: viewOf(acct.Subscription)}
	if c.Result != nil {
		r = *c.Result
		if v := r.Subscription; v != nil && v.Quantity < 1 { // an answer recorded before seats were counted
			view := *v
			view.Quantity = seats(v.Quantity)
			r.Subscription = &view
		}
	}
	r.Replayed = true
	return r
}

func errTokenInvalid() *Error {
	return Errorf(CodeTokenInvalid, "the confirmation token is not valid: start again with a first call")
}

func errApprovalPending() *Error {
	return &Error{Code: CodeApprovalPending, RetryAfter: 5 * time.Second,
		Message: "waiting for an approver; retry the same call after the change is approved"}
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
		sub.Plan == t.FromPlan && sub.Version == t.SubscriptionVer && seats(sub.Quantity) == seats(t.Quantity) &&
		sub.CancelAtPeriodEnd == t.FromCancelAtPeriodEnd && sub.Status != "canceled" &&
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

// rolledBack answers a second call whose transaction did not commit: the
// database failed. Before the recovery point nothing was sent and the token
// is as it was; after it, the confirmation is executing and is settled by
// the owner's retry or any replica's settler, with the same idempotency key.
func (s *Service) rolledBack(req ChangeRequest, err error) error {
	if errors.Is(err, ErrRecoveryPointSaved) {
		return errOutcomeUnknown(err)
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

// answerFor is the answer to req of a second call that ended in err: one
// whose outcome is unknown tells a caller that never held the token
// (ChangeRequest.TokenWithheld) to read the subscription, not to retry
// with a token it does not have.
func answerFor(req ChangeRequest, err error) error {
	var e *Error
	if !req.TokenWithheld || !errors.As(err, &e) || !e.outcomeUnknown {
		return err
	}
	told := *e
	told.Message = msgOutcomeUnknown + "billingd settles it on its own within seconds: read the subscription " +
		"(get_subscription, GET /api/billing/subscription) shortly to learn the outcome; do not start a new change"
	return &told
}

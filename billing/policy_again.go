package billing

import (
	"context"
	"time"
)

// The org's policy decided again at the second call (contract §10): before
// the provider is asked (policyAtExecution) and once more right before the
// request leaves (policyAgainBeforeSend).

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
	to := c.Terms.ToPlan
	if o, ok := operationOf(c.Operation); ok {
		to = planNamed(o, to)
	}
	return changeFacts{op: c.Operation, to: to, amountDueCents: c.Terms.AmountDueCents,
		danger: c.Terms.danger(), agent: c.Agent || agentNow}
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

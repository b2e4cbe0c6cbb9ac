package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// dailyWindow is the period of a policy's daily limit.
const dailyWindow = 24 * time.Hour

// ruling is the policy's action for a change and, for a denial, the reason
// the audit log and the client are given.
func ruling(p Policy, facts changeFacts) (Action, string) {
	action, rule := p.decide(facts)
	if action == ActionDeny {
		return ActionDeny, "policy rule " + rule
	}
	return action, ""
}

// overDailyLimit reports whether the org already made the policy's daily
// number of changes. The count is read through counter: the store for a
// first call, the transaction for a second call that holds locks.
func overDailyLimit(ctx context.Context, counter changeCounter, p Policy, org string) (bool, error) {
	if p.DailyLimit <= 0 {
		return false, nil
	}
	n, err := counter.ExecutedSince(ctx, org, dailyWindow)
	if err != nil {
		return false, fmt.Errorf("count executed changes: %w", err)
	}
	return n >= p.DailyLimit, nil
}

// refuseEarly applies what of the policy needs no price, before the provider
// is asked for one: a rule that denies the change whatever it costs, and the
// daily limit. A refused first call costs no provider request, so a denied
// principal cannot spend the account's API rate limit; it counts against the
// caller's issuance rate limit like an issued token.
//
// The price can only make a change more restricted (a rule on the amount
// matches more as the amount grows, and allow turns into confirm), so a
// change denied at an amount of zero is denied at any amount.
func (s *Service) refuseEarly(ctx context.Context, caller Caller, p Policy, op Operation, to string) error {
	action, reason := ruling(p, changeFacts{op: op, to: to, agent: p.isAgent(caller)})
	if action != ActionDeny {
		over, err := overDailyLimit(ctx, s.store, p, caller.Org)
		if err != nil {
			return storeError("check daily limit", err)
		}
		if !over {
			return nil
		}
		reason = reasonDailyLimit
	}
	return s.denyFirstCall(ctx, caller, op, reason)
}

// gate applies the org's policy to a quoted change: it returns the action
// the policy asks for, or operation_denied when a rule on the amount denies
// it (refuseEarly took the other denials before the quote).
func (s *Service) gate(ctx context.Context, caller Caller, p Policy, op Operation, t Terms) (Action, error) {
	action, reason := ruling(p, changeFacts{op: op, to: t.ToPlan, amountDueCents: t.AmountDueCents, agent: p.isAgent(caller)})
	if action == ActionDeny {
		return "", s.denyFirstCall(ctx, caller, op, reason)
	}
	return action, nil
}

// denyFirstCall audits a first call refused by policy and returns
// operation_denied. It holds no lock, so the event is written on its own.
func (s *Service) denyFirstCall(ctx context.Context, caller Caller, op Operation, reason string) error {
	if err := s.store.AppendAudit(ctx, s.event(caller, op, EventOperationDenied, "", reason)); err != nil {
		return storeError("audit denial", err)
	}
	return errDenied(reason)
}

func errDenied(reason string) *Error {
	return Errorf(CodeOperationDenied, "the organisation's policy does not allow this change (%s)", reason)
}

// Approve grants the out-of-band approval a confirmation waits for. The
// approver must hold billing:admin in the same org and must not be the
// principal who asked.
func (s *Service) Approve(ctx context.Context, approver Caller, id string) (ConfirmationView, error) {
	return s.decideApproval(ctx, approver, id, ApprovalGranted)
}

// Reject refuses the approval; the confirmation can no longer execute.
func (s *Service) Reject(ctx context.Context, approver Caller, id string) (ConfirmationView, error) {
	return s.decideApproval(ctx, approver, id, ApprovalRejected)
}

func (s *Service) decideApproval(ctx context.Context, approver Caller, id string, decision Approval) (ConfirmationView, error) {
	if !approver.Admin {
		return ConfirmationView{}, Errorf(CodeInsufficientScope, "approving needs billing:admin")
	}
	if !wellFormedConfirmationID(id) {
		return ConfirmationView{}, Errorf(CodeNotFound, "confirmation not found")
	}
	var view ConfirmationView
	var outcome error
	err := s.store.InTx(ctx, func(tx Tx) error {
		c, now, err := tx.LockByID(ctx, approver.Org, id)
		if errors.Is(err, ErrNotFound) {
			outcome = Errorf(CodeNotFound, "confirmation not found")
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock confirmation: %w", err)
		}
		if outcome = s.checkApprovable(c, approver, decision, now); outcome != nil || c.Approval == decision {
			view = viewOfConfirmation(c)
			return nil
		}
		view, err = s.recordApproval(ctx, tx, approver, c, decision)
		return err
	})
	if err != nil {
		return ConfirmationView{}, storeError("decide approval", err)
	}
	return view, outcome
}

// checkApprovable holds the rules of approving: only a pending confirmation
// that waits for approval, before it expires, by someone other than the
// requester. Repeating the same decision is accepted.
func (s *Service) checkApprovable(c Confirmation, approver Caller, decision Approval, now time.Time) error {
	switch {
	case c.Approval == "":
		return Errorf(CodeInvalidRequest, "this confirmation does not need approval")
	case c.Principal == approver.Principal:
		return Errorf(CodeOperationDenied, "a change cannot be approved by the person who asked for it")
	case c.Approval == decision:
		return nil
	case c.Status != StatusPending || c.Approval != ApprovalPending:
		return Errorf(CodeTokenInvalid, "the confirmation is no longer waiting for approval")
	case now.After(c.ExpiresAt.Add(s.skew)):
		return errTokenExpired()
	}
	return nil
}

func (s *Service) recordApproval(ctx context.Context, tx Tx, approver Caller, c Confirmation, decision Approval) (ConfirmationView, error) {
	event, status := EventApprovalGranted, Status("")
	if decision == ApprovalRejected {
		event, status = EventApprovalRejected, StatusRejected
	}
	ev := s.event(approver, c.Operation, event, c.ID, "requested by "+c.Principal)
	err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: status,
		Approval: &ApprovalDecision{State: decision, Approver: approver.Principal}, Events: []AuditEvent{ev}})
	c.Approval, c.Approver = decision, approver.Principal
	if status != "" {
		c.Status = status
	}
	return viewOfConfirmation(c), err
}

// Policy returns the caller's org's policy (the empty policy, "confirm
// everything", when none was set).
func (s *Service) Policy(ctx context.Context, caller Caller) (Policy, error) {
	acct, _, err := s.account(ctx, caller.Org)
	if err != nil {
		return Policy{}, err
	}
	if acct.Policy.Rules == nil {
		acct.Policy.Rules = []PolicyRule{}
	}
	return acct.Policy, nil
}

// SetPolicy validates and stores the org's policy, audited as
// POLICY_UPDATED in the same transaction.
func (s *Service) SetPolicy(ctx context.Context, caller Caller, p Policy) (Policy, error) {
	if !caller.Admin {
		return Policy{}, Errorf(CodeInsufficientScope, "changing the policy needs billing:admin")
	}
	if err := p.validate(s.catalog); err != nil {
		return Policy{}, Errorf(CodeInvalidRequest, "invalid policy: %v", err)
	}
	if p.Rules == nil {
		p.Rules = []PolicyRule{}
	}
	if _, _, err := s.account(ctx, caller.Org); err != nil {
		return Policy{}, err
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.SavePolicy(ctx, caller.Org, p, caller.Principal); err != nil {
			return err
		}
		return tx.Record(ctx, Record{Events: []AuditEvent{s.event(caller, "", EventPolicyUpdated, "", "")}})
	})
	if err != nil {
		return Policy{}, storeError("save policy", err)
	}
	return p, nil
}

package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Approval of a change by another person (the approve level, contract §10):
// an admin of the org, a person (person.go: signed in on billingd's pages
// or through a PERSON_CLIENTS client), who is not the requester.

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
	if !WellFormedConfirmationID(id) {
		return ConfirmationView{}, Errorf(CodeNotFound, "confirmation not found")
	}
	if err := s.checkApproverIsPerson(ctx, approver); err != nil {
		return ConfirmationView{}, err
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

// checkApproverIsPerson refuses an approval made by an agent (person.go):
// over MCP, with a token of a client not in PERSON_CLIENTS or of no client,
// or by a client the org's policy lists in agent_clients. Approving is what
// an agent holding the token must not be able to do for itself.
func (s *Service) checkApproverIsPerson(ctx context.Context, approver Caller) error {
	acct, _, err := s.account(ctx, approver.Org)
	if err != nil {
		return err
	}
	if s.people.isAgent(acct.Policy, approver) {
		return Errorf(CodeOperationDenied, "approvals come from people: sign in on the approval page, not through an agent")
	}
	return nil
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
	auth := Authentication{AuthTime: approver.AuthTime, ACR: approver.ACR}
	err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: status,
		Approval: &ApprovalDecision{State: decision, Approver: approver.Principal, Auth: auth}, Events: []AuditEvent{ev}})
	c.Approval, c.Approver, c.ApproverAuth = decision, approver.Principal, auth
	if status != "" {
		c.Status = status
	}
	return viewOfConfirmation(c), err
}

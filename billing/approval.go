package billing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Approval of a change by other people (the approve level, contract §10):
// admins of the org, people (person.go: signed in on billingd's pages or
// through a PERSON_CLIENTS client), none the requester. A rule may ask for
// N of them (approvals_required, 1–5): the change can execute once N
// distinct people approved; one rejection rejects it; and if the approvals
// are not complete when its window ends, it is rejected too (reason
// expired): it fails closed, never open. Every decision, and the expiry,
// is made under the confirmation's row lock, so approvers deciding at
// once on several replicas are counted one after the other.

// Why a change waiting for approval was rejected (Confirmation.Failure and
// the reason of its audit event).
const (
	reasonRejected = "rejected" // a person rejected it
	reasonExpired  = "expired"  // its window ended before enough approvals
)

// ApprovalProgress is how far a change that waits for approvers got: both
// set for a change that needs approval, both absent otherwise (pointers, so
// that none given yet still shows as 0, and the JSON schema MCP derives
// has them optional).
type ApprovalProgress struct {
	ApprovalsGiven    *int `json:"approvals_given,omitempty"`
	ApprovalsRequired *int `json:"approvals_required,omitempty"`
}

// Counts returns the progress as numbers; ok is false when no approval is
// needed.
func (p ApprovalProgress) Counts() (given, required int, ok bool) {
	if p.ApprovalsGiven == nil || p.ApprovalsRequired == nil {
		return 0, 0, false
	}
	return *p.ApprovalsGiven, *p.ApprovalsRequired, true
}

// progressOf is c's approval progress; empty when c needs no approval.
func progressOf(c Confirmation) ApprovalProgress {
	if c.Approval == "" {
		return ApprovalProgress{}
	}
	given, required := len(c.Approvers), approvalsNeeded(c)
	return ApprovalProgress{ApprovalsGiven: &given, ApprovalsRequired: &required}
}

// approvalsNeeded is c's N; a confirmation stored before N existed needs one.
func approvalsNeeded(c Confirmation) int {
	return max(c.ApprovalsRequired, 1)
}

// Approve counts the approver's approval of the change a confirmation
// waits for. The approver must hold billing:admin in the same org, be a
// person and not the principal who asked; approving twice counts once.
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
	if err := s.RequirePerson(ctx, approver, ActDecideApproval); err != nil {
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
		if s.approvalLapsed(c, now) {
			// Too late to decide: the window ended first, so the change is
			// rejected, whether or not the expiry round got to it yet.
			outcome = Errorf(CodeTokenExpired, "%s", msgApprovalExpired)
			return s.expireApproval(ctx, tx, approver.RequestID, c)
		}
		if outcome = s.checkApprovable(c, approver, decision); outcome != nil || alreadyDecided(c, approver, decision) {
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
// that waits for approval, by someone other than the requester (the window
// was checked before: approvalLapsed). Repeating a decision already made is
// accepted (alreadyDecided).
func (s *Service) checkApprovable(c Confirmation, approver Caller, decision Approval) error {
	switch {
	case c.Approval == "":
		return Errorf(CodeInvalidRequest, "this confirmation does not need approval")
	case c.Principal == approver.Principal:
		return Errorf(CodeOperationDenied, "a change cannot be approved by the person who asked for it")
	case alreadyDecided(c, approver, decision):
		return nil
	case c.Status == StatusRejected && c.Failure == reasonExpired:
		return Errorf(CodeTokenExpired, "%s", msgApprovalExpired)
	case c.Status != StatusPending || c.Approval != ApprovalPending:
		return Errorf(CodeTokenInvalid, "the confirmation is no longer waiting for approval")
	}
	return nil
}

// alreadyDecided reports whether decision repeats one made: the approver
// approved before (an approval counts once), or the change was rejected
// already.
func alreadyDecided(c Confirmation, approver Caller, decision Approval) bool {
	if decision == ApprovalGranted {
		return slices.Contains(c.Approvers, approver.Principal)
	}
	return c.Approval == ApprovalRejected
}

// recordApproval records a new decision on c: an approval counted (the
// change is approved once approvalsNeeded people approved), or a
// rejection, which rejects the change whatever was approved before. Each
// is audited once: APPROVAL_GRANTED with the count ("approvals 1 of 2"),
// APPROVAL_REJECTED with reason rejected.
func (s *Service) recordApproval(ctx context.Context, tx Tx, approver Caller, c Confirmation, decision Approval) (ConfirmationView, error) {
	auth := Authentication{AuthTime: approver.AuthTime, ACR: approver.ACR}
	c.Approver, c.ApproverAuth = approver.Principal, auth
	r := Record{ConfirmationID: c.ID}
	var ev AuditEvent
	if decision == ApprovalRejected {
		c.Approval, c.Status, c.Failure = ApprovalRejected, StatusRejected, reasonRejected
		r.Status, r.Failure = StatusRejected, reasonRejected
		ev = s.event(approver, c.Operation, EventApprovalRejected, c.ID, reasonRejected)
	} else {
		c.Approvers = append(slices.Clone(c.Approvers), approver.Principal)
		if len(c.Approvers) >= approvalsNeeded(c) {
			c.Approval = ApprovalGranted
		}
		ev = s.event(approver, c.Operation, EventApprovalGranted, c.ID, approvalsReason(len(c.Approvers), approvalsNeeded(c)))
	}
	r.Approval = &ApprovalDecision{State: c.Approval, Approver: c.Approver, Auth: auth, Approvers: c.Approvers}
	r.Events = []AuditEvent{ev}
	return viewOfConfirmation(c), tx.Record(ctx, r)
}

// approvalsReason is the reason of an APPROVAL_GRANTED event: how many
// people approved so far and how many are needed. It is part of the
// event's chain hash; ApprovalCounts reads it back.
func approvalsReason(given, required int) string {
	return fmt.Sprintf("approvals %d of %d", given, required)
}

// ApprovalCounts returns the approvals given and required that an
// APPROVAL_GRANTED event states (its reason, "approvals 1 of 2"); ok is
// false for any other event, and for one written before several approvers
// existed (one of one).
func ApprovalCounts(e AuditEvent) (given, required int, ok bool) {
	if e.Event != EventApprovalGranted {
		return 0, 0, false
	}
	g, r, found := strings.Cut(strings.TrimPrefix(e.Reason, "approvals "), " of ")
	given, errG := strconv.Atoi(g)
	required, errR := strconv.Atoi(r)
	if !found || errG != nil || errR != nil {
		return 0, 0, false
	}
	return given, required, true
}

// needsMoreApprovals reports whether the policy at execution, asking for
// need approvers, asks more of c than its record: approval where none was
// asked, or more approvers than when it was issued. An issued
// confirmation's N is never lowered by a later policy.
func needsMoreApprovals(c Confirmation, need int) bool {
	return c.Approval == "" || need > approvalsNeeded(c)
}

// raiseApprovals records that c needs need approvers from now on; it waits
// for the ones it lacks (approval_pending), counting those who approved
// already.
func (s *Service) raiseApprovals(ctx context.Context, tx Tx, c *Confirmation, need int) (refused error, err error) {
	c.ApprovalsRequired = max(need, c.ApprovalsRequired)
	c.Approval = ApprovalPending
	if len(c.Approvers) >= c.ApprovalsRequired {
		c.Approval = ApprovalGranted
	}
	err = tx.Record(ctx, Record{ConfirmationID: c.ID, Approval: &ApprovalDecision{State: c.Approval,
		Approver: c.Approver, Auth: c.ApproverAuth, Required: c.ApprovalsRequired}})
	if c.Approval == ApprovalPending {
		refused = errApprovalPending()
	}
	return refused, err
}

// approvalLapsed reports whether c still waits for approvals its window no
// longer allows (by the database clock, with the allowed skew, as the
// token's expiry): it must be rejected, never left to execute.
func (s *Service) approvalLapsed(c Confirmation, now time.Time) bool {
	return c.Status == StatusPending && c.Approval == ApprovalPending && now.After(c.ExpiresAt.Add(s.skew))
}

const msgApprovalExpired = "the approval window ended before enough people approved: the change was rejected (expired) " +
	"and nothing was changed; start again with a first call"

// expireApproval records lapsed c as rejected, reason expired, with one
// audit event, APPROVAL_EXPIRED, in the requester's name (the change is
// theirs; nobody decided). requestID is the request that found it lapsed,
// or the expiry round's.
func (s *Service) expireApproval(ctx context.Context, tx Tx, requestID string, c Confirmation) error {
	owner := Caller{Org: c.Org, Principal: c.Principal, Client: c.Client, RequestID: requestID}
	expired := s.event(owner, c.Operation, EventApprovalExpired, c.ID, reasonExpired)
	return tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusRejected, Failure: reasonExpired,
		Approval: &ApprovalDecision{State: ApprovalRejected, Approver: c.Approver, Auth: c.ApproverAuth},
		Events:   []AuditEvent{expired}})
}

// errApprovalRejected is the answer to a second call of a rejected change.
func errApprovalRejected(c Confirmation) *Error {
	if c.Failure == reasonExpired {
		return Errorf(CodeApprovalRejected, "%s", msgApprovalExpired)
	}
	return Errorf(CodeApprovalRejected, "an approver rejected this change (rejected): nothing was changed")
}

// approvalExpiryRequestID names the expiry round in the audit log.
const approvalExpiryRequestID = "approval_expiry"

// ExpireApprovals rejects, reason expired, the changes whose approvals were
// not complete when their window ended, one transaction each, up to limit,
// and returns how many it rejected. Every replica runs it: the database
// hands each lapsed confirmation to one of them (SKIP LOCKED), and nothing
// of it lives in a replica's memory. A second call or an approval that
// comes first records the same (approvalLapsed).
func (s *Service) ExpireApprovals(ctx context.Context, limit int) (int, error) {
	n := 0
	var seen []string // each looked at once a round
	for len(seen) < limit {
		found, expired := false, false
		err := s.store.InTx(ctx, func(tx Tx) error {
			c, now, err := tx.LockLapsedApproval(ctx, s.skew, seen)
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock lapsed approval: %w", err)
			}
			found = true
			seen = append(seen, c.ID)
			if !s.approvalLapsed(c, now) {
				return nil
			}
			expired = true
			return s.expireApproval(ctx, tx, approvalExpiryRequestID, c)
		})
		if err != nil {
			return n, storeError("expire approvals", err)
		}
		if !found {
			break
		}
		if expired {
			n++
		}
	}
	return n, nil
}

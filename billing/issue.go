package billing

import (
	"context"
	"errors"
	"time"
)

// The first call's last step: the confirmation stored for the quoted
// terms, with its summary and the token that redeems it.

// issue stores the confirmation for terms. A change that needs approval may
// stay redeemable for the policy's approval window, if that is longer.
func (s *Service) issue(ctx context.Context, caller Caller, acct Account, op *operation, terms Terms, action Action) (Confirmation, string, error) {
	from, _ := s.catalog.Plan(terms.FromPlan)
	to, _ := s.catalog.Plan(terms.ToPlan)
	token, hash := newToken()
	c := Confirmation{
		ID: newConfirmationID(), TokenHash: hash,
		Org: caller.Org, Principal: caller.Principal, Client: caller.Client, Agent: s.people.isAgent(acct.Policy, caller),
		Operation: op.name, Terms: terms, Status: StatusPending,
		Summary: summarize(displayNameOr(acct.Org), op, from, to, terms, s.scheduledWords(terms.Cancels)),
	}
	ttl := s.ttl
	switch action {
	case ActionApprove:
		c.Approval, c.ApprovalsRequired = ApprovalPending, acct.Policy.approvalsRequired(factsOf(c, false))
	case ActionVerify:
		c.VerifyRequired = true
	}
	if action == ActionApprove || action == ActionVerify {
		// A person has to act on a page: the policy may give them longer.
		ttl = max(ttl, time.Duration(acct.Policy.ApprovalWindowSeconds)*time.Second)
	}
	c, err := s.store.IssueConfirmation(ctx, c, ttl, s.event(caller, c.Operation, EventTokenIssued, "", ""))
	if errors.Is(err, ErrConflict) {
		// Checked before the quote (Unsettled) and again, atomically, by
		// the insert: the preview may have been made while another change
		// committed its recovery point or was recorded.
		return Confirmation{}, "", errQuoteOutdated(err)
	}
	if err != nil {
		return Confirmation{}, "", storeError("issue confirmation", err)
	}
	return c, token, nil
}

// errQuoteOutdated: the subscription the quote was made from was changed,
// or another change of it began executing or is being made, while the
// quote was made.
func errQuoteOutdated(cause error) *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: 5 * time.Second, Err: cause,
		Message: "the subscription changed, or another change of it is being made, while this summary was being made; " +
			"nothing was issued: retry shortly"}
}

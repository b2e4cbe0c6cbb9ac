package billing

import (
	"context"
	"time"
)

// propose is the first call: it executes nothing. Its steps, each in a
// file of its own: the target (target.go), the policy's refusals before
// the price (policy.go), the quote (quote.go), the policy's action on the
// price, a standing mandate (mandate.go), and the confirmation issued
// (issue.go).
func (s *Service) propose(ctx context.Context, caller Caller, op *operation, req ChangeRequest) (ChangeResult, error) {
	acct, activity, err := s.accountForCall(ctx, caller)
	if err != nil {
		return ChangeResult{}, err
	}
	if err := s.checkRate(activity, limitProposals); err != nil {
		return ChangeResult{}, err
	}
	now := activity.Now
	from, w, err := s.target(op, acct.Subscription, req, now)
	if err != nil {
		return ChangeResult{}, err
	}
	if alreadyThere(acct.Subscription, w, req) {
		no := false
		return ChangeResult{OK: true, ConfirmRequired: &no, Noop: true, Subscription: viewOf(acct.Subscription)}, nil
	}
	if acct.Unsettled {
		return ChangeResult{}, errUnsettled()
	}
	if err := s.refuseEarly(ctx, caller, acct.Policy, op, w.to.ID); err != nil {
		return ChangeResult{}, err
	}
	s.atAccount(ctx, StepQuote, &acct)
	terms, err := s.quote(ctx, acct, from, w, req, now)
	if err != nil {
		return ChangeResult{}, err
	}
	action, err := s.gate(ctx, caller, acct.Policy, op, terms)
	if err != nil {
		return ChangeResult{}, err
	}
	var mandate *Mandate
	if action == ActionConfirm {
		// A standing mandate replaces the confirm level's second call,
		// never a stronger level (mandate.go).
		if mandate, err = s.coveringMandate(ctx, caller, acct, req.Operation, terms, now); err != nil {
			return ChangeResult{}, err
		}
	}
	s.atAccount(ctx, StepIssue, &acct)
	c, token, err := s.issue(ctx, caller, acct, op, terms, action)
	if err != nil {
		return ChangeResult{}, err
	}
	if action == ActionAllow {
		// The org's policy lets this change (nothing due now) run at once.
		caller.viaAllow = true
		second := requestOf(c)
		second.ConfirmToken, second.TokenWithheld = token, true
		return s.confirmAdmitted(ctx, caller, second)
	}
	if mandate != nil {
		return s.executeUnderMandate(ctx, caller, mandate, c, token)
	}
	return s.proposal(c, token), nil
}

func detailsOf(t Terms) Details {
	d := Details{
		Danger: t.danger(),
		From:   t.FromPlan, To: t.ToPlan, QuantityFrom: t.seatsFrom(), QuantityTo: t.seatsTo(),
		AmountDueNowCents: t.AmountDueCents, CreditCents: t.CreditCents, Currency: t.Currency,
		CurrencyDigits: DigitsOf(t.Currency),
		SubtotalCents:  t.SubtotalCents, DiscountCents: t.DiscountCents, TaxCents: t.TaxCents,
		CreditAppliedCents: t.CreditAppliedCents,
		EffectiveAt:        t.ProrationDate.UTC(), NextChargeAt: t.NextChargeAt.UTC(), Livemode: t.Livemode,
		CancelsScheduledChange: scheduledView(t.Cancels),
	}
	if t.AtPeriodEnd {
		d.At, d.EffectiveAt, d.NextCharge = AtPeriodEnd, t.NextChargeAt.UTC(), t.AtRenewal
	}
	d.Cancellation, d.CancelReason, d.CancelComment = t.Cancellation, t.CancelReason, t.CancelComment
	switch t.Cancellation {
	case CancelNow:
		at := t.ProrationDate.UTC()
		d.CancelAt = &at
	case CancelAtPeriodEnd:
		at := t.NextChargeAt.UTC()
		d.CancelAt, d.EffectiveAt = &at, at
	}
	return d
}

func (s *Service) proposal(c Confirmation, token string) ChangeResult {
	yes := true
	expires := c.ExpiresAt.UTC()
	details := detailsOf(c.Terms)
	details.ApprovalProgress = progressOf(c)
	r := ChangeResult{
		ConfirmRequired: &yes, ConfirmToken: token, ConfirmationID: c.ID,
		Operation: c.Operation, Summary: c.Summary, Details: &details,
		TTLSeconds: int(c.ExpiresAt.Sub(c.CreatedAt).Round(time.Second) / time.Second),
		ExpiresAt:  &expires,
	}
	if c.Approval == ApprovalPending {
		r.ApprovalRequired, r.ApprovalURL = true, s.approvalURL(c.ID)
	}
	if c.VerifyRequired {
		r.VerificationRequired, r.VerifyURL = true, s.verifyURL(c.ID)
	}
	return r
}

// approvalURL is the dashboard page where an approver sees the summary.
func (s *Service) approvalURL(id string) string {
	return s.publicBaseURL + "/approvals/" + id
}

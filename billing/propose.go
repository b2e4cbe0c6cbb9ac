package billing

import (
	"context"
	"fmt"
	"time"
)

// propose is the first call: it executes nothing.
func (s *Service) propose(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	acct, activity, err := s.accountForCall(ctx, caller)
	if err != nil {
		return ChangeResult{}, err
	}
	if err := s.checkRate(activity, limitProposals); err != nil {
		return ChangeResult{}, err
	}
	now := activity.Now
	from, to, err := s.planChange(acct.Subscription, req)
	if err != nil {
		return ChangeResult{}, err
	}
	if from.ID == to.ID {
		no := false
		return ChangeResult{OK: true, ConfirmRequired: &no, Noop: true, Subscription: viewOf(acct.Subscription)}, nil
	}
	if acct.Unsettled {
		return ChangeResult{}, errUnsettled()
	}
	if err := s.refuseEarly(ctx, caller, acct.Policy, req.Operation, to.ID); err != nil {
		return ChangeResult{}, err
	}
	terms, err := s.quote(ctx, acct, from, to, req.Operation, now)
	if err != nil {
		return ChangeResult{}, err
	}
	action, err := s.gate(ctx, caller, acct.Policy, req.Operation, terms)
	if err != nil {
		return ChangeResult{}, err
	}
	c, token, err := s.issue(ctx, caller, acct, req.Operation, terms, action)
	if err != nil {
		return ChangeResult{}, err
	}
	if action == ActionAllow {
		// The org's policy lets this change (nothing due now) run at once.
		caller.viaAllow = true
		return s.confirmAdmitted(ctx, caller, ChangeRequest{Operation: req.Operation, To: req.To, ConfirmToken: token, TokenWithheld: true})
	}
	return s.proposal(c, token), nil
}

// quote asks the provider what the change costs and returns the terms the
// summary will state.
func (s *Service) quote(ctx context.Context, acct Account, from, to Plan, op Operation, now time.Time) (Terms, error) {
	change := planChangeFor(acct, to, op, now.Truncate(time.Second))
	preview, err := s.payments.PreviewPlanChange(ctx, change)
	if err != nil {
		return Terms{}, providerError("preview plan change", err)
	}
	if preview.Currency != "" && preview.Currency != to.Currency {
		return Terms{}, wrapErr(CodeInternal, "internal error",
			fmt.Errorf("preview currency %q differs from catalog %q", preview.Currency, to.Currency))
	}
	terms := termsFor(acct.Subscription, from, to, change, preview)
	if change.ChargeNow {
		if err := amountParts(&terms, preview); err != nil {
			return Terms{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("quote: %w", err))
		}
	}
	terms.Livemode = s.livemode
	return terms, nil
}

// issue stores the confirmation for terms. A change that needs approval may
// stay redeemable for the policy's approval window, if that is longer.
func (s *Service) issue(ctx context.Context, caller Caller, acct Account, op Operation, terms Terms, action Action) (Confirmation, string, error) {
	from, _ := s.catalog.Plan(terms.FromPlan)
	to, _ := s.catalog.Plan(terms.ToPlan)
	token, hash := newToken()
	c := Confirmation{
		ID: newConfirmationID(), TokenHash: hash,
		Org: caller.Org, Principal: caller.Principal, Client: caller.Client, Agent: acct.Policy.isAgent(caller),
		Operation: op, Terms: terms, Status: StatusPending,
		Summary: summarize(displayNameOr(acct.Org), op, from, to, terms),
	}
	ttl := s.ttl
	switch action {
	case ActionApprove:
		c.Approval = ApprovalPending
	case ActionVerify:
		c.VerifyRequired = true
	}
	if action == ActionApprove || action == ActionVerify {
		// A person has to act on a page: the policy may give them longer.
		ttl = max(ttl, time.Duration(acct.Policy.ApprovalWindowSeconds)*time.Second)
	}
	c, err := s.store.IssueConfirmation(ctx, c, ttl, s.event(caller, op, EventTokenIssued, "", ""))
	if err != nil {
		return Confirmation{}, "", storeError("issue confirmation", err)
	}
	return c, token, nil
}

// planChange resolves the plans of a request and checks its direction.
func (s *Service) planChange(sub Subscription, req ChangeRequest) (from, to Plan, err error) {
	from, ok := s.catalog.Plan(sub.Plan)
	if !ok {
		return Plan{}, Plan{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("subscription of %s is on unknown plan %q", sub.Org, sub.Plan))
	}
	to, ok = s.catalog.Plan(req.To)
	if !ok {
		return Plan{}, Plan{}, Errorf(CodeUnknownPlan, "no such plan")
	}
	up := s.catalog.rank(to.ID) > s.catalog.rank(from.ID)
	down := s.catalog.rank(to.ID) < s.catalog.rank(from.ID)
	switch {
	case req.Operation == OpUpgrade && down:
		return Plan{}, Plan{}, Errorf(CodeInvalidPlanChange, "that plan is cheaper than the current one: use downgrade")
	case req.Operation == OpDowngrade && up:
		return Plan{}, Plan{}, Errorf(CodeInvalidPlanChange, "that plan is more expensive than the current one: use upgrade")
	}
	return from, to, nil
}

// planChangeFor is the provider request a proposal quotes and its
// confirmation executes. Upgrades charge the prorated difference now and fail
// if the payment fails; downgrades credit it on the next invoice.
func planChangeFor(acct Account, to Plan, op Operation, prorationDate time.Time) PlanChange {
	return PlanChange{
		CustomerID:     acct.Org.StripeCustomerID,
		SubscriptionID: acct.Subscription.StripeSubscriptionID,
		ItemID:         acct.Subscription.StripeItemID,
		NewPriceID:     to.StripePriceID,
		ProrationDate:  prorationDate,
		ChargeNow:      op == OpUpgrade,
	}
}

func termsFor(sub Subscription, from, to Plan, change PlanChange, p Preview) Terms {
	t := Terms{
		FromPlan: from.ID, ToPlan: to.ID,
		FromPriceID: from.StripePriceID, ToPriceID: to.StripePriceID,
		FromAmountCents: from.AmountCents, ToAmountCents: to.AmountCents,
		Currency: to.Currency, ProrationDate: change.ProrationDate,
		SubscriptionVer: sub.Version, NextChargeAt: sub.CurrentPeriodEnd,
	}
	if change.ChargeNow {
		t.AmountDueCents = max(p.AmountDueNowCents, 0)
	} else {
		t.CreditCents = max(-p.ProrationCents, 0)
	}
	return t
}

func detailsOf(t Terms) Details {
	return Details{
		From: t.FromPlan, To: t.ToPlan,
		AmountDueNowCents: t.AmountDueCents, CreditCents: t.CreditCents, Currency: t.Currency,
		SubtotalCents: t.SubtotalCents, DiscountCents: t.DiscountCents, TaxCents: t.TaxCents,
		CreditAppliedCents: t.CreditAppliedCents,
		EffectiveAt:        t.ProrationDate.UTC(), NextChargeAt: t.NextChargeAt.UTC(), Livemode: t.Livemode,
	}
}

func (s *Service) proposal(c Confirmation, token string) ChangeResult {
	yes := true
	expires := c.ExpiresAt.UTC()
	details := detailsOf(c.Terms)
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

func displayNameOr(o Org) string {
	if name := DisplayName(o.Name); name != "" {
		return name
	}
	return o.ID
}

package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// propose is the first call: it executes nothing.
func (s *Service) propose(ctx context.Context, caller Caller, op *operation, req ChangeRequest) (ChangeResult, error) {
	acct, activity, err := s.accountForCall(ctx, caller)
	if err != nil {
		return ChangeResult{}, err
	}
	if err := s.checkRate(activity, limitProposals); err != nil {
		return ChangeResult{}, err
	}
	now := activity.Now
	from, w, err := s.target(op, acct.Subscription, req)
	if err != nil {
		return ChangeResult{}, err
	}
	// The renewal could overtake a change at the period's end, a
	// cancellation or a resumption (datePassed is the same rule for the
	// second call's terms).
	if s.renewalDue(acct.Subscription, req.atPeriodEnd() || w.cancellation != "", now) {
		return ChangeResult{}, errRenewalDue()
	}
	if err := schedulable(acct.Subscription, from, w, req); err != nil {
		return ChangeResult{}, err
	}
	if alreadyThere(acct.Subscription, w, req) {
		no := false
		return ChangeResult{OK: true, ConfirmRequired: &no, Noop: true, Subscription: viewOf(acct.Subscription)}, nil
	}
	if acct.Unsettled {
		return ChangeResult{}, errUnsettled()
	}
	if err := s.refuseEarly(ctx, caller, acct.Policy, req.Operation, w.to.ID); err != nil {
		return ChangeResult{}, err
	}
	s.atAccount(ctx, StepQuote, &acct)
	terms, err := s.quote(ctx, acct, from, w, req, now)
	if err != nil {
		return ChangeResult{}, err
	}
	action, err := s.gate(ctx, caller, acct.Policy, req.Operation, terms)
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

// schedulable refuses a change at the period's end that the renewal would
// not make as quoted: a trial or an unpaid period ends otherwise than by a
// renewal at the price billingd quotes, and a subscription cancelled at the
// period's end does not renew at all.
func schedulable(sub Subscription, from Plan, w wanted, req ChangeRequest) error {
	if !req.atPeriodEnd() || w.cancellation != "" || from.ID == w.to.ID && w.seats == seats(sub.Quantity) {
		return nil
	}
	switch {
	case sub.CancelAtPeriodEnd:
		return Errorf(CodeInvalidPlanChange,
			"the subscription ends at the end of the period instead of renewing: resume it first, or make the change now")
	case sub.Status != "active":
		return Errorf(CodeInvalidPlanChange,
			"a change at the end of the period needs an active subscription; this one is %s: make the change now instead",
			sub.Status)
	}
	return nil
}

// alreadyThere reports whether the request asks for what the subscription
// already is or will be: its plan and seats with no change scheduled, or
// the change already scheduled; a cancellation already pending, or a
// resumption of a subscription that is not ending.
func alreadyThere(sub Subscription, w wanted, req ChangeRequest) bool {
	switch w.cancellation {
	case CancelAtPeriodEnd:
		return sub.CancelAtPeriodEnd && sub.Scheduled == nil
	case Resume:
		return !sub.CancelAtPeriodEnd
	case CancelNow:
		return false
	}
	if sc := sub.Scheduled; sc != nil {
		return req.atPeriodEnd() && sc.ToPlan == w.to.ID && sc.PriceID == w.to.StripePriceID && scheduledSeats(sub) == w.seats
	}
	return sub.Plan == w.to.ID && seats(sub.Quantity) == w.seats
}

// quote asks the provider what the change costs and returns the terms the
// summary will state. Keeping the plan (cancelling the scheduled change)
// costs nothing and needs no preview.
func (s *Service) quote(ctx context.Context, acct Account, from Plan, w wanted, req ChangeRequest, now time.Time) (Terms, error) {
	terms := termsFor(acct.Subscription, from, w, req, now.Truncate(time.Second))
	terms.Livemode = s.livemode
	if !terms.prices() {
		return terms, nil
	}
	to := w.to
	change := planChangeFor(acct, terms)
	preview, err := s.payments.PreviewPlanChange(ctx, change)
	if err != nil {
		return Terms{}, providerError("preview plan change", err)
	}
	if preview.Currency != "" && preview.Currency != to.Currency {
		return Terms{}, wrapErr(CodeInternal, "internal error",
			fmt.Errorf("preview currency %q differs from catalog %q", preview.Currency, to.Currency))
	}
	if err := priced(&terms, change, preview); err != nil {
		return Terms{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("quote: %w", err))
	}
	return terms, nil
}

// priced sets the amounts of the preview on t: what is charged now and its
// parts (upgrades), the credit carried to the next invoice (downgrades now),
// or what the renewal at the new price will charge (at the period's end).
func priced(t *Terms, change PlanChange, p Preview) error {
	switch {
	case change.AtPeriodEnd:
		if p.AtRenewal == nil {
			return errors.New("the preview of a period-end change has no renewal invoice")
		}
		renewal := *p.AtRenewal
		if err := checkParts(&renewal); err != nil {
			return err
		}
		t.AtRenewal = &renewal
		return nil
	case change.ChargeNow:
		t.AmountDueCents = max(p.AmountDueNowCents, 0)
		return amountParts(t, p)
	default:
		t.CreditCents = max(-p.ProrationCents, 0)
		return nil
	}
}

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
	c, err := s.store.IssueConfirmation(ctx, c, ttl, s.event(caller, op.name, EventTokenIssued, "", ""))
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

// target is what req asks of the subscription, as op reads it: the plan it
// is on, and what it is to become. A cancelled subscription changes no
// more.
func (s *Service) target(op *operation, sub Subscription, req ChangeRequest) (from Plan, w wanted, err error) {
	if sub.Status == "canceled" {
		return Plan{}, wanted{}, Errorf(CodeSubscriptionInactive,
			"the subscription was cancelled: it can no longer be changed, and nothing was done")
	}
	from, ok := s.catalog.Plan(sub.Plan)
	if !ok {
		return Plan{}, wanted{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("subscription of %s is on unknown plan %q", sub.Org, sub.Plan))
	}
	if w, err = op.target(s.catalog, sub, req); err != nil {
		return Plan{}, wanted{}, err
	}
	return from, w, nil
}

// planChangeFor is the provider request a proposal quotes and its
// confirmation executes, from the terms (the price the person agreed to,
// not the catalog's: a retry of the same key must be the same request even
// if the catalog changed). Upgrades charge the prorated difference now and
// fail if the payment fails; downgrades credit it on the next invoice, or
// wait for the period's end.
func planChangeFor(acct Account, t Terms) PlanChange {
	change := PlanChange{
		CustomerID:     acct.Org.StripeCustomerID,
		SubscriptionID: acct.Subscription.StripeSubscriptionID,
		ItemID:         acct.Subscription.StripeItemID,
		FromPriceID:    t.FromPriceID,
		NewPriceID:     t.ToPriceID,
		FromQuantity:   t.seatsFrom(),
		Quantity:       t.seatsTo(),
		ProrationDate:  t.ProrationDate,
		ChargeNow:      t.chargesNow(),
		Cancellation:   t.Cancellation,
		CancelReason:   t.CancelReason,
		CancelComment:  t.CancelComment,
		KeepPlan:       keepsPlan(t),
	}
	if t.AtPeriodEnd && !keepsPlan(t) {
		change.AtPeriodEnd, change.PeriodEnd = true, t.NextChargeAt
	}
	return change
}

// termsFor are the terms of the change w from the plan from, before the
// provider priced it.
func termsFor(sub Subscription, from Plan, w wanted, req ChangeRequest, prorationDate time.Time) Terms {
	to, n := w.to, w.seats
	t := Terms{
		FromPlan: from.ID, ToPlan: to.ID,
		FromPriceID: from.StripePriceID, ToPriceID: to.StripePriceID,
		FromAmountCents: from.AmountCents, ToAmountCents: to.AmountCents, Quantity: seats(sub.Quantity),
		Currency: to.Currency, ProrationDate: prorationDate,
		SubscriptionVer: sub.Version, NextChargeAt: sub.CurrentPeriodEnd, FromStatus: sub.Status,
		Cancels: sub.Scheduled, FromCancelAtPeriodEnd: sub.CancelAtPeriodEnd,
		Cancellation: w.cancellation,
	}
	if w.cancellation == CancelNow || w.cancellation == CancelAtPeriodEnd {
		t.CancelReason, t.CancelComment = req.Reason, req.Comment
	}
	if n != t.Quantity {
		t.ToQuantity = n
	}
	t.AtPeriodEnd = req.atPeriodEnd() && w.cancellation == "" && (from.ID != to.ID || n != t.Quantity)
	return t
}

// prices reports whether the provider must price t: a change that moves
// money now or at the renewal. Keeping the plan, cancelling at the
// period's end and resuming move none.
func (t Terms) prices() bool {
	return !keepsPlan(t) && t.Cancellation != CancelAtPeriodEnd && t.Cancellation != Resume
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

// scheduledWords names what a scheduled change changes to ("" for none):
// its plan's name (its id outside the catalog), with its seats when it
// schedules some ("Pro with 3 seats").
func (s *Service) scheduledWords(sc *ScheduledChange) string {
	if sc == nil {
		return ""
	}
	name := sc.ToPlan
	if p, ok := s.catalog.Plan(sc.ToPlan); ok {
		name = p.Name
	}
	if sc.Quantity > 0 {
		name += " with " + seatCount(sc.Quantity)
	}
	return name
}

func displayNameOr(o Org) string {
	if name := DisplayName(o.Name); name != "" {
		return name
	}
	return o.ID
}

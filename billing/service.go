package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
)

// Service is the handshake. REST and MCP both call it; neither holds a rule of
// its own.
type Service struct {
	store         Store
	payments      PaymentProvider
	catalog       Catalog
	ttl           time.Duration
	skew          time.Duration
	execTimeout   time.Duration
	limits        RateLimits
	publicBaseURL string
	acrValues     []string
	log           *slog.Logger
	evidence      EvidenceStore
	receipts      ReceiptSigner
	livemode      bool
}

// Config wires a Service.
type Config struct {
	Store    Store
	Payments PaymentProvider
	Catalog  Catalog
	// TokenTTL is how long a confirmation can be redeemed (1s–15m).
	TokenTTL time.Duration
	// ClockSkew is extra grace after a token's expires_at (0–300s).
	ClockSkew time.Duration
	// ExecutionTimeout bounds the payment provider call made while the
	// confirmation's row lock is held, so the lock is never held forever.
	ExecutionTimeout time.Duration
	// Limits bound each principal's first calls and failed second calls.
	Limits RateLimits
	// PublicBaseURL is where billingd is reached; approval links point there.
	PublicBaseURL string
	// VerifyACRValues, when set, are the acr values the verify level
	// accepts (VERIFY_ACR_VALUES, e.g. a passkey's); empty: any.
	VerifyACRValues []string
	Logger          *slog.Logger
	// Evidence reads audit exports and receipts (default: Store, when it
	// implements EvidenceStore).
	Evidence EvidenceStore
	// Receipts signs the receipt of every executed change; nil: none.
	Receipts ReceiptSigner
	// Livemode: the payment provider moves real money. When false, every
	// summary says so and details and receipts carry livemode false.
	Livemode bool
}

// Limits of the handshake's settings; configuration outside them is refused.
const (
	MinTokenTTL  = time.Second
	MaxTokenTTL  = 15 * time.Minute
	MaxClockSkew = 300 * time.Second
)

// NewService checks cfg and returns a Service.
func NewService(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil || cfg.Payments == nil:
		return nil, errors.New("billing: store and payment provider are required")
	case len(cfg.Catalog.plans) == 0:
		return nil, errors.New("billing: empty plan catalog")
	case cfg.TokenTTL < MinTokenTTL || cfg.TokenTTL > MaxTokenTTL:
		return nil, fmt.Errorf("billing: token TTL %s outside %s–%s", cfg.TokenTTL, MinTokenTTL, MaxTokenTTL)
	case cfg.ClockSkew < 0 || cfg.ClockSkew > MaxClockSkew:
		return nil, fmt.Errorf("billing: clock skew %s outside 0s–%s", cfg.ClockSkew, MaxClockSkew)
	case (cfg.Limits.Proposals > 0 || cfg.Limits.FailedConfirms > 0) && cfg.Limits.Window <= 0:
		return nil, errors.New("billing: rate limits need a window")
	}
	if cfg.ExecutionTimeout <= 0 {
		cfg.ExecutionTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if ev, ok := cfg.Store.(EvidenceStore); ok && cfg.Evidence == nil {
		cfg.Evidence = ev
	}
	return &Service{
		store: cfg.Store, payments: cfg.Payments, catalog: cfg.Catalog,
		ttl: cfg.TokenTTL, skew: cfg.ClockSkew, execTimeout: cfg.ExecutionTimeout, limits: cfg.Limits,
		publicBaseURL: strings.TrimSuffix(cfg.PublicBaseURL, "/"), acrValues: cfg.VerifyACRValues, log: cfg.Logger,
		evidence: cfg.Evidence, receipts: cfg.Receipts, livemode: cfg.Livemode,
	}, nil
}

// ChangeRequest is a call to upgrade_plan or downgrade_plan: without a token
// it is the first call, with one the second.
type ChangeRequest struct {
	Operation    Operation
	To           string
	ConfirmToken string
}

// ChangeResult is the body of a handshake response, in the contract's shape
// for all three outcomes: a proposal (first call), an executed change (second
// call) and a no-op (already on the plan).
type ChangeResult struct {
	OK bool `json:"ok,omitempty"`
	// Replayed: the owner repeated a second call that had already executed;
	// this is the original answer and nothing executed again.
	Replayed        bool      `json:"replayed,omitempty"`
	ConfirmRequired *bool     `json:"confirm_required,omitempty"`
	Noop            bool      `json:"noop,omitempty"`
	ConfirmToken    string    `json:"confirm_token,omitempty"`
	ConfirmationID  string    `json:"confirmation_id,omitempty"`
	Operation       Operation `json:"operation,omitempty"`
	Summary         string    `json:"summary,omitempty"`
	Details         *Details  `json:"details,omitempty"`
	// ApprovalRequired: the org's policy wants another person's approval,
	// given at ApprovalURL, before the second call can execute.
	ApprovalRequired bool   `json:"approval_required,omitempty"`
	ApprovalURL      string `json:"approval_url,omitempty"`
	// VerificationRequired: the org's policy wants the person who asked to
	// sign in again at the identity provider (at VerifyURL, or with a
	// step-up access token) before the second call can execute.
	VerificationRequired bool              `json:"verification_required,omitempty"`
	VerifyURL            string            `json:"verify_url,omitempty"`
	TTLSeconds           int               `json:"ttl_seconds,omitempty"`
	ExpiresAt            *time.Time        `json:"expires_at,omitempty"`
	Subscription         *SubscriptionView `json:"subscription,omitempty"`
	// Receipt is the signed receipt of the executed change (second call).
	Receipt string `json:"receipt,omitempty"`
}

// Proposed reports whether the result is a first-call proposal.
func (r ChangeResult) Proposed() bool { return r.ConfirmToken != "" }

// SubscriptionView is a subscription as clients see it.
type SubscriptionView struct {
	Org              string    `json:"org,omitempty"`
	Plan             string    `json:"plan"`
	Status           string    `json:"status"`
	CurrentPeriodEnd time.Time `json:"current_period_end"`
}

func viewOf(s Subscription) *SubscriptionView {
	return &SubscriptionView{Plan: s.Plan, Status: s.Status, CurrentPeriodEnd: s.CurrentPeriodEnd.UTC()}
}

var planIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ChangePlan is both calls of the handshake for upgrade_plan and
// downgrade_plan.
func (s *Service) ChangePlan(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	if err := validateRequest(req); err != nil {
		return ChangeResult{}, err
	}
	if req.ConfirmToken == "" {
		return s.propose(ctx, caller, req)
	}
	return s.confirm(ctx, caller, req)
}

// validateRequest checks the shape of a request before anything is looked
// up. The token's shape is checked by confirm, where a malformed token is
// answered like an unknown one.
func validateRequest(req ChangeRequest) error {
	if req.Operation != OpUpgrade && req.Operation != OpDowngrade {
		return Errorf(CodeInvalidRequest, "unknown operation")
	}
	if !planIDPattern.MatchString(req.To) {
		return Errorf(CodeInvalidRequest, `"to" must be a plan id`)
	}
	return nil
}

// propose is the first call: it executes nothing.
func (s *Service) propose(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	if err := s.checkRate(ctx, caller, limitProposals); err != nil {
		return ChangeResult{}, err
	}
	acct, now, err := s.account(ctx, caller.Org)
	if err != nil {
		return ChangeResult{}, err
	}
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
		return s.confirm(ctx, caller, ChangeRequest{Operation: req.Operation, To: req.To, ConfirmToken: token})
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
		EffectiveAt: t.ProrationDate.UTC(), NextChargeAt: t.NextChargeAt.UTC(), Livemode: t.Livemode,
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

func (s *Service) account(ctx context.Context, org string) (Account, time.Time, error) {
	acct, now, err := s.store.Account(ctx, org)
	if errors.Is(err, ErrNotFound) {
		return Account{}, time.Time{}, Errorf(CodeNotFound, "organisation not found")
	}
	if err != nil {
		return Account{}, time.Time{}, storeError("read account", err)
	}
	return acct, now, nil
}

// event starts an audit event for the caller.
func (s *Service) event(caller Caller, op Operation, name, confirmationID, reason string) AuditEvent {
	outcome := "ok"
	switch name {
	case EventTokenRejected, EventOperationDenied:
		outcome = "rejected"
	case EventOperationFailed:
		outcome = "failed"
	case EventTokenRevoked:
		outcome = "revoked"
	}
	return AuditEvent{
		Event: name, Org: caller.Org, Principal: caller.Principal, Client: caller.Client,
		Operation: string(op), ConfirmationID: confirmationID, Outcome: outcome, Reason: reason,
		RequestID: caller.RequestID,
	}
}

// storeError turns a store failure into the client's view of it.
func storeError(doing string, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return wrapErr(CodeUpstreamUnavailable, "the database is unavailable; retry shortly", fmt.Errorf("%s: %w", doing, err))
	}
	return wrapErr(CodeInternal, "internal error", fmt.Errorf("%s: %w", doing, err))
}

// providerError turns a payment provider failure into the client's view.
func providerError(doing string, err error) error {
	cause := fmt.Errorf("%s: %w", doing, err)
	switch {
	case errors.Is(err, ErrPaymentDeclined):
		return wrapErr(CodePaymentFailed, "the payment was declined; the plan was not changed", cause)
	case errors.Is(err, ErrUnavailable):
		return wrapErr(CodeUpstreamUnavailable, "the payment provider is unavailable; retry shortly", cause)
	default:
		return wrapErr(CodeInternal, "internal error", cause)
	}
}

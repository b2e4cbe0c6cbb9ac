package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Service is the handshake. REST and MCP both call it; neither holds a rule of
// its own.
type Service struct {
	store         Store
	executions    transactor // where steps that call the provider hold their transactions (admission.go)
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
	admission     admission // executions running at once (admission.go)
	steps         StepHook  // the failpoints' hook (steps.go); nil in production
	people        people    // who is a person (person.go)
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
	// PersonClients (PERSON_CLIENTS) are the OAuth client ids of
	// person-facing apps, such as the operator's own dashboard: their
	// calls are a person's (person.go). Every other bearer client is an
	// agent's.
	PersonClients []string
	// MaxExecutions is how many second calls may execute at once, each
	// holding a database connection while the provider answers; one more is
	// refused at once with upstream_unavailable and Retry-After (admission.go).
	// 0: DefaultMaxExecutions.
	MaxExecutions int
	// Steps runs when a named step of the money path begins (steps.go):
	// tests arm failpoints with it. nil in production.
	Steps StepHook
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
	case cfg.MaxExecutions < 0:
		return nil, errors.New("billing: negative MaxExecutions")
	case slices.Contains(cfg.PersonClients, ""):
		return nil, errors.New("billing: empty person client id")
	}
	if cfg.MaxExecutions == 0 {
		cfg.MaxExecutions = DefaultMaxExecutions
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
		store: cfg.Store, executions: executionsOf(cfg.Store), payments: cfg.Payments, catalog: cfg.Catalog,
		ttl: cfg.TokenTTL, skew: cfg.ClockSkew, execTimeout: cfg.ExecutionTimeout, limits: cfg.Limits,
		publicBaseURL: strings.TrimSuffix(cfg.PublicBaseURL, "/"), acrValues: cfg.VerifyACRValues, log: cfg.Logger,
		evidence: cfg.Evidence, receipts: cfg.Receipts, livemode: cfg.Livemode,
		admission: newAdmission(cfg.MaxExecutions), steps: cfg.Steps,
		people: people{clients: slices.Clone(cfg.PersonClients)},
	}, nil
}

// ChangeRequest is a call of a gated operation (operation.go): without a
// token it is the first call, with one the second.
type ChangeRequest struct {
	Operation Operation
	// To is the plan a plan change moves to; Quantity the seats
	// change_seats asks for.
	To       string
	Quantity int64
	// Reason and Comment are a cancellation's feedback (Stripe's
	// cancellation_details: Reason one of CancelReasons).
	Reason, Comment string
	ConfirmToken    string
	// TokenWithheld: the caller never held ConfirmToken (an allow policy
	// executing at once, an MCP elicitation redeeming it for the agent), so
	// no answer may tell it to retry "with the same token".
	TokenWithheld bool
	// At is when the change is made: AtNow ("" too) or AtPeriodEnd
	// (downgrades and fewer seats only).
	At string
}

// When a change is made (ChangeRequest.At).
const (
	AtNow       = "now"
	AtPeriodEnd = "period_end"
)

// atPeriodEnd reports whether the request schedules its change.
func (r ChangeRequest) atPeriodEnd() bool { return r.At == AtPeriodEnd }

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
	// Charged is what the provider invoiced for the executed change at once
	// (upgrades), from the update's own invoice.
	Charged *Charged `json:"charged,omitempty"`
	// Notice tells the caller something it must pass on: an amount
	// invoiced that differs from the one quoted.
	Notice string `json:"notice,omitempty"`
	// MandateID: a standing mandate covered the first call, which executed
	// at once under it (contract §13).
	MandateID string `json:"mandate_id,omitempty"`
}

// Charged is the amount the provider invoiced for an executed change, with
// the amount quoted beside it.
type Charged struct {
	// AmountDueNowCents is the amount of the change's own invoice
	// (InvoiceID); nil when billingd could not identify that invoice
	// (AmountInvoicedUnknown).
	AmountDueNowCents       *int64 `json:"amount_due_now_cents,omitempty"`
	QuotedAmountDueNowCents int64  `json:"quoted_amount_due_now_cents"`
	Currency                string `json:"currency"`
	CurrencyDigits
	InvoiceID             string `json:"invoice_id,omitempty"`
	AmountInvoicedUnknown bool   `json:"amount_invoiced_unknown,omitempty"`
	// CreditedCents is what the change's final invoice credited to the
	// customer's balance (cancelling now: the unused time, as Stripe
	// prorated it when it was made; the summary's was as of the quote).
	CreditedCents int64 `json:"credited_cents,omitempty"`
}

// Proposed reports whether the result is a first-call proposal.
func (r ChangeResult) Proposed() bool { return r.ConfirmToken != "" }

// SubscriptionView is a subscription as clients see it.
type SubscriptionView struct {
	Org  string `json:"org,omitempty"`
	Plan string `json:"plan"`
	// Quantity is the seats the subscription is for (contract §15).
	Quantity         int64     `json:"quantity"`
	Status           string    `json:"status"`
	CurrentPeriodEnd time.Time `json:"current_period_end"`
	// CancelAtPeriodEnd: the subscription ends at current_period_end
	// instead of renewing (resume_subscription undoes it); CanceledAt is
	// when it was cancelled.
	CancelAtPeriodEnd bool       `json:"cancel_at_period_end"`
	CanceledAt        *time.Time `json:"canceled_at,omitempty"`
	// ScheduledChange is the change the provider will make at a later
	// date, until it is made.
	ScheduledChange *ScheduledChangeView `json:"scheduled_change,omitempty"`
}

// ScheduledChangeView is a scheduled change as clients see it.
type ScheduledChangeView struct {
	To string    `json:"to"`
	At time.Time `json:"at"`
	// Quantity is the seats from At, when the change changes them.
	Quantity       int64  `json:"quantity,omitempty"`
	ConfirmationID string `json:"confirmation_id,omitempty"`
}

func viewOf(s Subscription) *SubscriptionView {
	v := &SubscriptionView{Plan: s.Plan, Quantity: seats(s.Quantity), Status: s.Status, CurrentPeriodEnd: s.CurrentPeriodEnd.UTC(),
		CancelAtPeriodEnd: s.CancelAtPeriodEnd, ScheduledChange: scheduledView(s.Scheduled)}
	if !s.CanceledAt.IsZero() {
		at := s.CanceledAt.UTC()
		v.CanceledAt = &at
	}
	return v
}

func scheduledView(sc *ScheduledChange) *ScheduledChangeView {
	if sc == nil {
		return nil
	}
	return &ScheduledChangeView{To: sc.ToPlan, At: sc.At.UTC(), Quantity: sc.Quantity, ConfirmationID: sc.ConfirmationID}
}

var planIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ChangePlan is both calls of the handshake for every gated operation.
func (s *Service) ChangePlan(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	op, err := checkRequest(req)
	if err != nil {
		return ChangeResult{}, err
	}
	if req.ConfirmToken == "" {
		return s.propose(ctx, caller, op, req)
	}
	return s.confirmAdmitted(ctx, caller, req)
}

// validateRequest checks the shape of a request before anything is looked
// up. The token's shape is checked by consume (lookupKey), where a malformed token is
// answered like an unknown one.
func validateRequest(req ChangeRequest) error {
	_, err := checkRequest(req)
	return err
}

// checkRequest is validateRequest, returning the operation the request
// names.
func checkRequest(req ChangeRequest) (*operation, error) {
	op, ok := operationOf(req.Operation)
	if !ok {
		return nil, Errorf(CodeInvalidRequest, "unknown operation")
	}
	if req.At != "" && req.At != AtNow && req.At != AtPeriodEnd {
		return nil, Errorf(CodeInvalidRequest, `"at" must be "now" or "period_end"`)
	}
	return op, op.check(req)
}

// account reads an org with its subscription, and the database's now.
func (s *Service) account(ctx context.Context, org string) (Account, time.Time, error) {
	acct, activity, err := s.readAccount(ctx, org, "", 0)
	return acct, activity.Now, err
}

// accountForCall reads the caller's org and, for the rate limit on first
// calls, the caller's recent activity: one round trip.
func (s *Service) accountForCall(ctx context.Context, caller Caller) (Account, Activity, error) {
	return s.readAccount(ctx, caller.Org, caller.Principal, s.activityWindow(limitProposals))
}

// readAccount is Store.AccountForCall with its errors as the client sees them.
func (s *Service) readAccount(ctx context.Context, org, principal string, window time.Duration) (Account, Activity, error) {
	acct, activity, err := s.store.AccountForCall(ctx, org, principal, window)
	if errors.Is(err, ErrNotFound) {
		return Account{}, Activity{}, Errorf(CodeNotFound, "organisation not found")
	}
	if err != nil {
		return Account{}, Activity{}, storeError("read account", err)
	}
	return acct, activity, nil
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
	case errors.Is(err, ErrRateLimited):
		return errProviderRateLimited(cause)
	case errors.Is(err, ErrUnavailable):
		return wrapErr(CodeUpstreamUnavailable, "the payment provider is unavailable; retry shortly", cause)
	default:
		return wrapErr(CodeInternal, "internal error", cause)
	}
}

// errProviderRateLimited: the provider refused the request with its rate
// limit; nothing was done, and the same call may be made again.
func errProviderRateLimited(cause error) *Error {
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: providerRateLimitRetryAfter, Err: cause,
		Message: "the payment provider is receiving too many requests; nothing was changed. Retry the same call shortly"}
}

// providerRateLimitRetryAfter: Stripe's limits are per second.
const providerRateLimitRetryAfter = 2 * time.Second

package billing

import (
	"context"
	"time"
)

// PlanView is a catalog entry as clients see it (no provider ids).
type PlanView struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	CurrencyDigits
	Interval string `json:"interval"`
}

// Plans lists the catalog, cheapest first.
func (s *Service) Plans() []PlanView {
	plans := make([]PlanView, 0, len(s.catalog.plans))
	for _, p := range s.catalog.plans {
		plans = append(plans, PlanView{ID: p.ID, Name: p.Name, AmountCents: p.AmountCents, Currency: p.Currency,
			CurrencyDigits: DigitsOf(p.Currency), Interval: p.Interval})
	}
	return plans
}

// Subscription returns the caller's org's subscription.
func (s *Service) Subscription(ctx context.Context, caller Caller) (SubscriptionView, error) {
	acct, _, err := s.account(ctx, caller.Org)
	if err != nil {
		return SubscriptionView{}, err
	}
	v := viewOf(acct.Subscription)
	v.Org = acct.Org.ID
	return *v, nil
}

// ConfirmationView is a pending confirmation as listed to clients: never the
// token.
type ConfirmationView struct {
	ID        string    `json:"id"`
	Operation Operation `json:"operation"`
	Summary   string    `json:"summary"`
	Principal string    `json:"principal"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Status    Status    `json:"status"`
	Client    string    `json:"client,omitempty"`
	// Approval is set when the org's policy wants an approver: pending,
	// granted or rejected, and by whom.
	Approval Approval `json:"approval,omitempty"`
	Approver string   `json:"approver,omitempty"`
	// Approvers are the people who approved so far; ApprovalProgress says
	// how many approved and how many are needed.
	Approvers []string `json:"approvers,omitempty"`
	ApprovalProgress
	// VerificationRequired is set when the org's policy asked for the
	// verify level; VerifiedAt once the requester proved a fresh sign-in.
	VerificationRequired bool       `json:"verification_required,omitempty"`
	VerifiedAt           *time.Time `json:"verified_at,omitempty"`
}

func viewOfConfirmation(c Confirmation) ConfirmationView {
	v := ConfirmationView{ID: c.ID, Operation: c.Operation, Summary: c.Summary, Principal: c.Principal,
		CreatedAt: c.CreatedAt.UTC(), ExpiresAt: c.ExpiresAt.UTC(), Status: c.Status,
		Client: c.Client, Approval: c.Approval, Approver: c.Approver, VerificationRequired: c.VerifyRequired,
		Approvers: c.Approvers, ApprovalProgress: progressOf(c)}
	if c.Verification != nil {
		at := c.Verification.VerifiedAt.UTC()
		v.VerifiedAt = &at
	}
	return v
}

// PendingConfirmations lists the caller's pending confirmations, or all of
// the org's for an admin.
func (s *Service) PendingConfirmations(ctx context.Context, caller Caller) ([]ConfirmationView, error) {
	principal := caller.Principal
	if caller.Admin {
		principal = ""
	}
	cs, err := s.store.PendingConfirmations(ctx, caller.Org, principal)
	if err != nil {
		return nil, storeError("list confirmations", err)
	}
	views := make([]ConfirmationView, 0, len(cs))
	for _, c := range cs {
		views = append(views, viewOfConfirmation(c))
	}
	return views, nil
}

// Audit log page sizes.
const (
	DefaultAuditLimit = 50
	MaxAuditLimit     = 500
)

// AuditLog lists the org's audit events newest first; before is an event id
// to page from (0 for the newest).
func (s *Service) AuditLog(ctx context.Context, caller Caller, limit int, before int64) ([]AuditEvent, error) {
	if limit == 0 {
		limit = DefaultAuditLimit
	}
	if limit < 1 || limit > MaxAuditLimit || before < 0 {
		return nil, Errorf(CodeInvalidRequest, "limit must be 1–%d and before a positive event id", MaxAuditLimit)
	}
	events, err := s.store.AuditEvents(ctx, caller.Org, limit, before)
	if err != nil {
		return nil, storeError("read audit log", err)
	}
	return events, nil
}

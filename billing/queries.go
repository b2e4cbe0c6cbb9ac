package billing

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// PlanView is a catalog entry as clients see it (no provider ids).
type PlanView struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Interval    string `json:"interval"`
}

// Plans lists the catalog, cheapest first.
func (s *Service) Plans() []PlanView {
	plans := make([]PlanView, 0, len(s.catalog.plans))
	for _, p := range s.catalog.plans {
		plans = append(plans, PlanView{ID: p.ID, Name: p.Name, AmountCents: p.AmountCents, Currency: p.Currency, Interval: p.Interval})
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
	// VerificationRequired is set when the org's policy asked for the
	// verify level; VerifiedAt once the requester proved a fresh sign-in.
	VerificationRequired bool       `json:"verification_required,omitempty"`
	VerifiedAt           *time.Time `json:"verified_at,omitempty"`
}

func viewOfConfirmation(c Confirmation) ConfirmationView {
	v := ConfirmationView{ID: c.ID, Operation: c.Operation, Summary: c.Summary, Principal: c.Principal,
		CreatedAt: c.CreatedAt.UTC(), ExpiresAt: c.ExpiresAt.UTC(), Status: c.Status,
		Client: c.Client, Approval: c.Approval, Approver: c.Approver, VerificationRequired: c.VerifyRequired}
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

// CancelResult is the body of a successful cancel.
type CancelResult struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
}

// Cancel voids a pending confirmation of the caller's (an admin may cancel
// any of the org's). Cancelling a cancelled confirmation succeeds again;
// another principal's confirmation is not found.
func (s *Service) Cancel(ctx context.Context, caller Caller, id string) (CancelResult, error) {
	if !wellFormedConfirmationID(id) {
		return CancelResult{}, Errorf(CodeNotFound, "confirmation not found")
	}
	var outcome error
	err := s.store.InTx(ctx, func(tx Tx) error {
		c, _, err := tx.LockByID(ctx, caller.Org, id)
		if errors.Is(err, ErrNotFound) || err == nil && c.Principal != caller.Principal && !caller.Admin {
			outcome = Errorf(CodeNotFound, "confirmation not found")
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock confirmation: %w", err)
		}
		switch c.Status {
		case StatusCancelled:
			return nil
		case StatusPending:
			return tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusCancelled,
				Events: []AuditEvent{s.event(caller, c.Operation, EventTokenRevoked, c.ID, "cancelled")}})
		default:
			outcome = Errorf(CodeTokenInvalid, "the confirmation is no longer pending")
			return nil
		}
	})
	if err != nil {
		return CancelResult{}, storeError("cancel confirmation", err)
	}
	if outcome != nil {
		return CancelResult{}, outcome
	}
	return CancelResult{ID: id, Status: StatusCancelled}, nil
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

var orgIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CreateOrg creates the org's customer and subscription at the provider and
// stores them. The provider requests carry an idempotency key derived from
// the org id, so running it again after a failure does not create twice.
func (s *Service) CreateOrg(ctx context.Context, id, name, email, planID string) (Account, error) {
	display := DisplayName(name)
	switch {
	case !orgIDPattern.MatchString(id):
		return Account{}, Errorf(CodeInvalidRequest, "org id must be lower-case letters, digits, '-' or '_' (max 63)")
	case display == "" || display != name:
		return Account{}, Errorf(CodeInvalidRequest, "org name must be printable text without control or invisible characters (max %d characters)", maxDisplayNameRunes)
	}
	plan, ok := s.catalog.Plan(planID)
	if !ok {
		return Account{}, Errorf(CodeUnknownPlan, "no such plan")
	}
	if _, _, err := s.store.Account(ctx, id); err == nil {
		return Account{}, Errorf(CodeInvalidRequest, "org already exists")
	} else if !errors.Is(err, ErrNotFound) {
		return Account{}, storeError("read account", err)
	}
	created, err := s.payments.CreateCustomer(ctx, NewCustomer{OrgID: id, Name: name, Email: email, PriceID: plan.StripePriceID}, "billingd-org-"+id)
	if err != nil {
		return Account{}, providerError("create customer", err)
	}
	acct := Account{
		Org: Org{ID: id, Name: name, StripeCustomerID: created.CustomerID},
		Subscription: Subscription{Org: id, StripeSubscriptionID: created.SubscriptionID, StripeItemID: created.ItemID,
			Plan: plan.ID, Status: created.Status, CurrentPeriodEnd: created.CurrentPeriodEnd},
	}
	if err := s.store.CreateAccount(ctx, acct); err != nil {
		return Account{}, storeError("store account", err)
	}
	return acct, nil
}

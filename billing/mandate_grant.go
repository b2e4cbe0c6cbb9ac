package billing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// What a person does with standing mandates (contract §13): grant, list,
// preview and revoke them, and how they are written in words. How a
// mandate covers a change is in mandate.go.

func (s *Service) mandateStore() (MandateStore, error) {
	ms, ok := s.store.(MandateStore)
	if !ok {
		return nil, Errorf(CodeInternal, "mandates are not available with this store")
	}
	return ms, nil
}

// GrantMandate is POST /api/billing/mandates: a person, signed in within
// the last five minutes, grants an agent client a mandate.
func (s *Service) GrantMandate(ctx context.Context, caller Caller, req MandateRequest) (Mandate, error) {
	ms, err := s.mandateStore()
	if err != nil {
		return Mandate{}, err
	}
	signer, ok := s.receipts.(MandateSigner)
	if !ok {
		return Mandate{}, Errorf(CodeInternal, "mandates need receipt signing keys")
	}
	acct, now, err := s.account(ctx, caller.Org)
	if err != nil {
		return Mandate{}, err
	}
	if err := s.refuseAgent(ctx, caller, acct.Policy, ActGrantMandate); err != nil {
		return Mandate{}, err
	}
	if caller.AuthTime.IsZero() || now.Sub(caller.AuthTime) > MandateSignInMaxAge+s.skew ||
		len(s.acrValues) > 0 && !slices.Contains(s.acrValues, caller.ACR) {
		// As strong a sign-in as the verify level asks for one change
		// (VERIFY_ACR_VALUES): a mandate lets many go through.
		return Mandate{}, &Error{Code: CodeInsufficientUserAuthentication,
			Message: "granting a mandate needs a sign-in less than 5 minutes old, of the strength this service asks for a verified change: sign in again and retry",
			StepUp:  &StepUp{VerifyURL: s.publicBaseURL + "/mandates", ACRValues: slices.Clone(s.acrValues)}}
	}
	from, _ := s.catalog.Plan(acct.Subscription.Plan)
	m, err := s.mandateOf(caller, req, now, from.Currency)
	if err != nil {
		return Mandate{}, err
	}
	claims := MandateClaims{Issuer: s.publicBaseURL, Subject: m.Principal, IssuedAt: now.Unix(), Expiry: m.ExpiresAt.Unix(),
		MandateID: m.ID, Org: m.Org, Client: m.Client, Operations: m.Operations, ToPlans: m.ToPlans,
		MaxAmountDueCents: m.MaxAmountDueCents, BudgetCents: m.BudgetCents, MaxChanges: m.MaxChanges, MaxQuantity: m.MaxQuantity,
		ExpiresAt: m.ExpiresAt, Currency: m.Currency, CurrencyDigits: m.CurrencyDigits, AuthTime: caller.AuthTime.UTC()}
	if m.JWS, err = signer.SignMandate(claims); err != nil {
		return Mandate{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("sign mandate: %w", err))
	}
	granted := s.event(caller, "", EventMandateGranted, "", m.ID)
	if err := ms.InsertMandate(ctx, m, granted); err != nil {
		return Mandate{}, storeError("store mandate", err)
	}
	return m, nil
}

// mandateOf validates a request into a mandate granted now. Messages name
// the field, never what was written in it.
func (s *Service) mandateOf(caller Caller, req MandateRequest, now time.Time, currency string) (Mandate, error) {
	bad := func(msg string) (Mandate, error) { return Mandate{}, Errorf(CodeInvalidRequest, "%s", msg) }
	switch {
	case req.MaxAmountDueCents == nil || req.BudgetCents == nil || req.MaxChanges == nil || req.ExpiresAt == nil ||
		req.Client == "" || len(req.Operations) == 0 || len(req.ToPlans) == 0:
		return bad("every bound is required: client, operations, to_plans, max_amount_due_cents, budget_cents, max_changes, expires_at")
	case !clientIDPattern.MatchString(req.Client):
		return bad("client must be an OAuth client id")
	case *req.MaxAmountDueCents < 0 || *req.BudgetCents < 0:
		return bad("max_amount_due_cents and budget_cents must not be negative")
	case *req.MaxChanges < 1 || *req.MaxChanges > maxMandateChanges:
		return bad(fmt.Sprintf("max_changes must be 1 to %d", maxMandateChanges))
	case !req.ExpiresAt.After(now):
		return bad("expires_at must be in the future")
	case req.ExpiresAt.Sub(now) > MaxMandateLifetime:
		return bad("expires_at must be at most 90 days away")
	case len(req.Operations) > len(operations) || len(req.ToPlans) > 50:
		return bad("too many operations or to_plans")
	}
	for _, op := range req.Operations {
		switch _, ok := operationOf(op); {
		case !ok:
			return bad("operations must be " + operationList())
		case op == OpCancel || op == OpResume:
			return bad("a mandate cannot cover cancelling or resuming: a person decides that each time")
		}
	}
	for _, id := range req.ToPlans {
		if _, ok := s.catalog.Plan(id); !ok {
			return bad("to_plans must name plans of the catalog")
		}
	}
	var maxQuantity int64
	switch seats := slices.Contains(req.Operations, OpSeats); {
	case seats && req.MaxQuantity == nil:
		return bad("max_quantity is required with change_seats: the most seats the agent may set")
	case seats && (*req.MaxQuantity < 1 || *req.MaxQuantity > MaxSeats):
		return bad(fmt.Sprintf("max_quantity must be 1 to %d", MaxSeats))
	case !seats && req.MaxQuantity != nil:
		return bad("max_quantity bounds change_seats, which operations does not name")
	case seats:
		maxQuantity = *req.MaxQuantity
	}
	ops, plans := slices.Clone(req.Operations), slices.Clone(req.ToPlans)
	slices.Sort(ops)
	slices.Sort(plans)
	return Mandate{
		ID: newMandateID(), Org: caller.Org, Principal: caller.Principal, Client: req.Client,
		Operations: slices.Compact(ops), ToPlans: slices.Compact(plans),
		MaxAmountDueCents: *req.MaxAmountDueCents, BudgetCents: *req.BudgetCents, MaxChanges: *req.MaxChanges,
		MaxQuantity: maxQuantity, Currency: currency, CurrencyDigits: DigitsOf(currency),
		CreatedAt: now, ExpiresAt: req.ExpiresAt.UTC().Truncate(time.Second), Status: MandateActive,
	}, nil
}

// Mandates is GET /api/billing/mandates: the caller's own, or the org's
// for an admin.
func (s *Service) Mandates(ctx context.Context, caller Caller) ([]Mandate, error) {
	ms, err := s.mandateStore()
	if err != nil {
		return nil, err
	}
	principal := caller.Principal
	if caller.Admin {
		principal = ""
	}
	list, err := ms.Mandates(ctx, caller.Org, principal, "")
	if err != nil {
		return nil, storeError("list mandates", err)
	}
	if list == nil {
		list = []Mandate{}
	}
	return list, nil
}

// RevokeMandate is DELETE /api/billing/mandates/{id}: by the person who
// granted it or an admin, at once. A change already executing under it
// (its recovery point committed) is not recalled; none starts after.
func (s *Service) RevokeMandate(ctx context.Context, caller Caller, id string) (Mandate, error) {
	ms, err := s.mandateStore()
	if err != nil {
		return Mandate{}, err
	}
	if !WellFormedMandateID(id) {
		return Mandate{}, Errorf(CodeNotFound, "no such mandate")
	}
	allowed := func(m Mandate) bool { return caller.Admin || m.Principal == caller.Principal }
	m, err := ms.RevokeMandate(ctx, caller.Org, id, caller.Principal, allowed,
		s.event(caller, "", EventMandateRevoked, "", id))
	if errors.Is(err, ErrNotFound) {
		return Mandate{}, Errorf(CodeNotFound, "no such mandate")
	}
	if err != nil {
		return Mandate{}, storeError("revoke mandate", err)
	}
	return m, nil
}

// PreviewMandate checks req as GrantMandate would, but for the sign-in's
// age, and returns the mandate it would grant, without id or signature:
// what the dashboard states in words before the person confirms.
func (s *Service) PreviewMandate(ctx context.Context, caller Caller, req MandateRequest) (Mandate, error) {
	acct, now, err := s.account(ctx, caller.Org)
	if err != nil {
		return Mandate{}, err
	}
	if err := s.refuseAgent(ctx, caller, acct.Policy, ActGrantMandate); err != nil {
		return Mandate{}, err
	}
	from, _ := s.catalog.Plan(acct.Subscription.Plan)
	m, err := s.mandateOf(caller, req, now, from.Currency)
	m.ID = ""
	return m, err
}

// MandateCurrency is the currency a mandate of the caller's org counts
// in: its plan's.
func (s *Service) MandateCurrency(ctx context.Context, caller Caller) (string, error) {
	acct, _, err := s.account(ctx, caller.Org)
	if err != nil {
		return "", err
	}
	from, _ := s.catalog.Plan(acct.Subscription.Plan)
	return from.Currency, nil
}

// MandatesLeft is what get_subscription tells an agent of its mandates.
type MandatesLeft struct {
	ID                string      `json:"id"`
	Operations        []Operation `json:"operations"`
	ToPlans           []string    `json:"to_plans"`
	MaxAmountDueCents int64       `json:"max_amount_due_cents"`
	BudgetLeftCents   int64       `json:"budget_left_cents"`
	ChangesLeft       int         `json:"changes_left"`
	MaxQuantity       int64       `json:"max_quantity,omitempty"`
	Currency          string      `json:"currency"`
	CurrencyDigits
	ExpiresAt time.Time `json:"expires_at"`
}

// ActiveMandates lists the active mandates of the caller's client on
// behalf of the caller's principal, with what is left of each.
func (s *Service) ActiveMandates(ctx context.Context, caller Caller) ([]MandatesLeft, error) {
	ms, ok := s.store.(MandateStore)
	if !ok || caller.Client == "" {
		return nil, nil
	}
	list, err := ms.Mandates(ctx, caller.Org, caller.Principal, caller.Client)
	if err != nil {
		return nil, storeError("read mandates", err)
	}
	var left []MandatesLeft
	for _, m := range list {
		if m.Status != MandateActive || m.Changes >= m.MaxChanges {
			continue
		}
		left = append(left, MandatesLeft{ID: m.ID, Operations: m.Operations, ToPlans: m.ToPlans,
			MaxAmountDueCents: m.MaxAmountDueCents, BudgetLeftCents: max(m.BudgetCents-m.SpentCents, 0),
			ChangesLeft: m.MaxChanges - m.Changes, MaxQuantity: m.MaxQuantity, Currency: m.Currency, CurrencyDigits: m.CurrencyDigits,
			ExpiresAt: m.ExpiresAt})
	}
	return left, nil
}

// Words states m's bounds as a person reads them, amounts written in the
// currency's digits: what the dashboard shows before the person confirms,
// and beside each mandate after.
func (m Mandate) Words() string {
	return fmt.Sprintf("%s may %s to %s without asking you: at most %s charged now per change and %s in all, "+
		"at most %d %s, until %s. Policies that ask for more than a confirmation still apply.",
		m.Client, opWords(m.Operations, m.MaxQuantity), m.ToPlansWords(), formatMoney(m.MaxAmountDueCents, m.Currency),
		formatMoney(m.BudgetCents, m.Currency), m.MaxChanges, plural(m.MaxChanges, "change", "changes"),
		m.ExpiresAt.UTC().Format("Jan 2, 2006 15:04 UTC"))
}

// SpentWords states what m has used, as a person reads it.
func (m Mandate) SpentWords() string {
	return fmt.Sprintf("%s spent in %d %s", formatMoney(m.SpentCents, m.Currency), m.Changes,
		plural(m.Changes, "change", "changes"))
}

// ToPlansWords names m's plans.
func (m Mandate) ToPlansWords() string { return strings.Join(m.ToPlans, " or ") }

// Words states what is left of a mandate, for the agent holding it.
func (l MandatesLeft) Words() string {
	return fmt.Sprintf("Standing mandate %s lets you %s to %s without asking the user: at most %s charged now per change; "+
		"%s and %d %s left; until %s. A first call it covers executes at once (its result carries mandate_id); "+
		"any other change needs the usual confirmation.",
		l.ID, opWords(l.Operations, l.MaxQuantity), strings.Join(l.ToPlans, " or "), formatMoney(l.MaxAmountDueCents, l.Currency),
		formatMoney(l.BudgetLeftCents, l.Currency), l.ChangesLeft, plural(l.ChangesLeft, "change", "changes"),
		l.ExpiresAt.UTC().Format("Jan 2, 2006 15:04 UTC"))
}

// opWords names what a mandate's operations let an agent do: "upgrade or
// change the seats (up to 10)".
func opWords(ops []Operation, maxQuantity int64) string {
	words := make([]string, len(ops))
	for i, op := range ops {
		words[i] = strings.TrimSuffix(string(op), "_plan")
		if op == OpSeats {
			words[i] = fmt.Sprintf("change the seats (up to %d)", maxQuantity)
		}
	}
	return strings.Join(words, " or ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

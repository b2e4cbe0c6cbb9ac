package billing

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Standing mandates (contract §13): a person, signed in afresh, lets one
// agent client make bounded plan changes later without asking them each
// time — AP2's open mandate, applied to plan changes.
//
// A mandate replaces exactly one thing: the confirm level's second call.
// A first call by the mandate's client on behalf of its person that the
// mandate covers is proposed as usual (quote, policy, issue) and then
// redeemed at once, inside billingd, through the ordinary second call
// (confirm.go) with the token it was just issued. Every guarantee of the
// second call — the locks, the policy decided again, the check at the
// provider, the recovery point, the settler, the sweep's oracle — applies
// unchanged. What the mandate adds is one check in consume, under the
// locks: the mandate row is locked and its bounds checked again against
// what it has spent (spendMandate). The spend is the recovery point itself:
// the confirmation becomes executing with consent
// {"method":"mandate","mandate_id":…} in the write that commits the
// recovery point, and a mandate's spend is the sum of its executing and
// executed confirmations. A change finally not made leaves executing and
// so gives back what it spent, whichever replica records it and however
// late; nothing is released by hand.
//
// What a mandate never does: outrank a deny, an approve or a verify rule
// (the policy asks for more than a confirmation; the person is not there
// to give it: the ordinary handshake follows), let an agent grant itself a
// mandate, or cover a change of another client, another person or another
// org.

// MaxMandateLifetime is the longest a mandate may run (contract §13).
const MaxMandateLifetime = 90 * 24 * time.Hour

// MandateSignInMaxAge is how old the person's sign-in may be when granting
// a mandate (contract §13: auth_time at most 5 minutes old).
const MandateSignInMaxAge = 5 * time.Minute

// maxMandateChanges bounds max_changes: a mandate is for a few changes,
// and the count must fit its column.
const maxMandateChanges = 1000

// Mandate statuses.
const (
	MandateActive  = "active"
	MandateExpired = "expired"
	MandateRevoked = "revoked"
)

// MandateRequest is what a person grants (POST /api/billing/mandates).
// Every bound is required: a nil field is refused.
type MandateRequest struct {
	Client            string
	Operations        []Operation
	ToPlans           []string
	MaxAmountDueCents *int64
	BudgetCents       *int64
	MaxChanges        *int
	ExpiresAt         *time.Time
	// MaxQuantity bounds the seats a change_seats it covers may set (1 to
	// MaxSeats); required with change_seats, refused without it.
	MaxQuantity *int64
}

// Mandate is a granted mandate with what it has spent.
type Mandate struct {
	ID                string      `json:"id"`
	Org               string      `json:"org"`
	Principal         string      `json:"principal"` // the person who granted it (sub)
	Client            string      `json:"client"`    // the agent client it lets act
	Operations        []Operation `json:"operations"`
	ToPlans           []string    `json:"to_plans"`
	MaxAmountDueCents int64       `json:"max_amount_due_cents"`
	BudgetCents       int64       `json:"budget_cents"`
	MaxChanges        int         `json:"max_changes"`
	// MaxQuantity is the most seats a change of seats it covers may set
	// (0: it covers none).
	MaxQuantity int64  `json:"max_quantity,omitempty"`
	Currency    string `json:"currency"`
	CurrencyDigits
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	// Status is active, expired or revoked, as of the database's now.
	Status string `json:"status"`
	// SpentCents and Changes are what its executed and executing changes
	// used (their quoted amounts due now).
	SpentCents int64 `json:"spent_cents"`
	Changes    int   `json:"changes"`
	// JWS is the signed mandate (MandateClaims), the person's proof of
	// what they allowed.
	JWS string `json:"mandate"`
}

// statusAt is m's status at now.
func (m Mandate) statusAt(now time.Time) string {
	switch {
	case m.RevokedAt != nil:
		return MandateRevoked
	case !now.Before(m.ExpiresAt):
		return MandateExpired
	}
	return MandateActive
}

// MandateClaims are what a signed mandate states: every bound, named as
// the request names it, and the person.
type MandateClaims struct {
	Issuer            string      `json:"iss"`
	Subject           string      `json:"sub"`
	IssuedAt          int64       `json:"iat"`
	Expiry            int64       `json:"exp"`
	MandateID         string      `json:"mandate_id"`
	Org               string      `json:"org"`
	Client            string      `json:"client"`
	Operations        []Operation `json:"operations"`
	ToPlans           []string    `json:"to_plans"`
	MaxAmountDueCents int64       `json:"max_amount_due_cents"`
	BudgetCents       int64       `json:"budget_cents"`
	MaxChanges        int         `json:"max_changes"`
	MaxQuantity       int64       `json:"max_quantity,omitempty"`
	ExpiresAt         time.Time   `json:"expires_at"`
	Currency          string      `json:"currency"`
	CurrencyDigits
	// AuthTime is the person's sign-in the grant was made with.
	AuthTime time.Time `json:"auth_time"`
}

// MandateSigner signs mandates with the receipt keys (internal/receipt).
type MandateSigner interface {
	SignMandate(MandateClaims) (string, error)
}

// MandateStore keeps mandates. What a mandate spent is computed from its
// confirmations (see above), never stored beside it.
type MandateStore interface {
	// InsertMandate stores m with the audit event, in one transaction.
	InsertMandate(ctx context.Context, m Mandate, event AuditEvent) error
	// Mandates lists the org's mandates, newest first, with what each
	// spent; only principal's when principal is set, and only client's
	// when client is set.
	Mandates(ctx context.Context, org, principal, client string) ([]Mandate, error)
	// RevokeMandate marks the org's mandate id revoked by by, now, with the
	// audit event, unless it was already revoked; it returns the mandate.
	// allowed decides, on the locked row, whether by may revoke it; false:
	// nothing is written and ErrNotFound is returned.
	RevokeMandate(ctx context.Context, org, id, by string, allowed func(Mandate) bool, event AuditEvent) (Mandate, error)
}

// mandateLocker is what a second call's transaction needs of a mandate:
// the row locked, with what it spent as of the lock (ErrNotFound if the
// org has no such mandate). The PostgreSQL store's Tx has it.
type mandateLocker interface {
	LockMandate(ctx context.Context, org, id string) (Mandate, time.Time, error)
}

// Audit events of mandates.
const (
	EventMandateGranted = "MANDATE_GRANTED"
	EventMandateRevoked = "MANDATE_REVOKED"
)

const mandatePrefix = "mdt_"

func newMandateID() string { return mandatePrefix + randomString(confirmationIDBytes) }

// WellFormedMandateID reports whether s can be a mandate id.
func WellFormedMandateID(s string) bool { return mandateIDPattern.MatchString(s) }

var mandateIDPattern = regexp.MustCompile(`^mdt_[A-Za-z0-9_-]{16,64}$`)

// clientIDPattern: printable ASCII without spaces, as OAuth client ids are.
var clientIDPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// mandateFacts are what a mandate decides a change on.
type mandateFacts struct {
	org, principal, client string
	op                     Operation
	to                     string
	atPeriodEnd            bool
	cancels                bool  // the change cancels a scheduled change (a keep, or an upgrade over a scheduled downgrade)
	seats                  bool  // the change changes the seats
	seatsTo                int64 // the seats after it
	ends                   bool  // the change cancels or resumes the subscription
	amountDueCents         int64
}

// covers reports whether m, with what it spent, covers the change at now:
// "" if it does, else why not (for logs and tests).
func (m Mandate) covers(f mandateFacts, now time.Time) string {
	switch {
	case m.Org != f.org || m.Principal != f.principal || m.Client != f.client:
		return "another org, person or client"
	case m.statusAt(now) != MandateActive:
		return m.statusAt(now)
	case !slices.Contains(m.Operations, f.op):
		return "operation"
	case !slices.Contains(m.ToPlans, f.to):
		return "plan"
	case f.atPeriodEnd:
		// A change at the period's end charges later, at a price the
		// person's bounds were not set against.
		return "at period end"
	case f.ends:
		// Ending a subscription is a person's to decide each time, and
		// cancelling now cannot be undone.
		return "cancellation"
	case f.seats && (m.MaxQuantity == 0 || f.seatsTo > m.MaxQuantity):
		// Seats only within the max_quantity the person set.
		return "seats"
	case f.cancels:
		// Cancelling a scheduled change (the person's downgrade, say)
		// costs nothing now and the higher price at every renewal after:
		// what it costs is not what the bounds measure.
		return "cancels a scheduled change"
	case f.amountDueCents > m.MaxAmountDueCents:
		return "amount"
	case m.SpentCents+f.amountDueCents > m.BudgetCents:
		return "budget"
	case m.Changes >= m.MaxChanges:
		return "changes"
	}
	return ""
}

// coveringMandate is the oldest of the caller's mandates that covers the
// quoted change, or nil. It locks nothing: spendMandate decides again under
// the locks.
func (s *Service) coveringMandate(ctx context.Context, caller Caller, acct Account, op Operation, t Terms, now time.Time) (*Mandate, error) {
	ms, ok := s.store.(MandateStore)
	if !ok || caller.Client == "" || !acct.Mandated {
		return nil, nil
	}
	list, err := ms.Mandates(ctx, caller.Org, caller.Principal, caller.Client)
	if err != nil {
		return nil, storeError("read mandates", err)
	}
	f := mandateFactsOf(caller, op, t)
	for i := len(list) - 1; i >= 0; i-- { // newest first: the oldest covering one
		if list[i].covers(f, now) == "" {
			return &list[i], nil
		}
	}
	return nil, nil
}

// mandateFactsOf are the facts a mandate decides a change on: who asks,
// through which client, and the change.
func mandateFactsOf(caller Caller, op Operation, t Terms) mandateFacts {
	return mandateFacts{org: caller.Org, principal: caller.Principal, client: caller.Client,
		op: op, to: t.ToPlan, atPeriodEnd: t.AtPeriodEnd, cancels: t.Cancels != nil, seats: t.seatsTo() != t.seatsFrom(), seatsTo: t.seatsTo(), ends: t.Cancellation != "",
		amountDueCents: t.AmountDueCents}
}

// errMandateNoLongerCovers: between the first call's look and the locks,
// the mandate was revoked or spent by a concurrent change. Nothing was
// recorded; the first call answers with the ordinary proposal.
var errMandateNoLongerCovers = errors.New("the mandate no longer covers the change")

// spendMandate is the mandate's check in consume, under the subscription's
// and the confirmation's locks: the mandate row locked (after them: the one
// lock order), its bounds decided again with what it spent as of the lock.
// The spend itself is the recovery point that follows (see above); the
// mandate's lock is held until it commits, so two changes can never both
// count on the same remaining budget.
func (s *Service) spendMandate(ctx context.Context, tx Tx, caller Caller, c Confirmation) (notCovered error, err error) {
	m, now, found, err := lockMandate(ctx, tx, c.Org, caller.mandate)
	if err != nil {
		return nil, err
	}
	if !found {
		return errMandateNoLongerCovers, nil
	}
	if why := m.covers(mandateFactsOf(caller, c.Operation, c.Terms), now); why != "" {
		s.log.Info("mandate no longer covers the change; ordinary handshake", "mandate_id", m.ID,
			"confirmation_id", c.ID, "why", why)
		return errMandateNoLongerCovers, nil
	}
	return nil, nil
}

// executeUnderMandate redeems the confirmation just issued for a covered
// first call, as its second call, under mandate m. A mandate that no
// longer covers it when locked leaves the ordinary proposal.
func (s *Service) executeUnderMandate(ctx context.Context, caller Caller, m *Mandate,
	c Confirmation, token string) (ChangeResult, error) {
	caller.mandate = m.ID
	second := requestOf(c) // the first call's request, as its confirmation names it
	second.ConfirmToken, second.TokenWithheld = token, true
	res, err := s.confirmAdmitted(ctx, caller, second)
	switch {
	case errors.Is(err, errMandateNoLongerCovers):
		return s.proposal(c, token), nil
	case ErrorCode(err) == CodeApprovalPending:
		// The policy, decided again at execution, now asks for an
		// approval (recorded on c, with the approvers it needs): the
		// ordinary handshake, whose token the agent needs for its second
		// call once approved, showing what was recorded.
		c.Approval = ApprovalPending
		if recorded, err := s.recordedConfirmation(ctx, caller.Org, c.ID); err == nil {
			c = recorded
		}
		return s.proposal(c, token), nil
	case ErrorCode(err) == CodeInsufficientUserAuthentication:
		// Likewise for a verification the policy now asks for.
		c.VerifyRequired = true
		return s.proposal(c, token), nil
	}
	return res, err
}

// recordedConfirmation reads the org's confirmation id as committed.
func (s *Service) recordedConfirmation(ctx context.Context, org, id string) (c Confirmation, err error) {
	err = s.store.InTx(ctx, func(tx Tx) (err error) {
		c, _, err = tx.LockByID(ctx, org, id)
		return err
	})
	return c, err
}

// mandateStillHolds is the mandate's part of a resend's consent (settle.go,
// consentHolds): a change made under a mandate is sent again only while
// the mandate is neither revoked nor expired. Its budget needs no second
// look: the change has counted against it since its recovery point.
func (s *Service) mandateStillHolds(ctx context.Context, tx Tx, c Confirmation, now time.Time) (bool, error) {
	k := c.Consent
	if k == nil || k.Method != ConsentMandate {
		return true, nil
	}
	m, _, found, err := lockMandate(ctx, tx, c.Org, k.MandateID)
	if err != nil || !found {
		return false, err
	}
	return m.statusAt(now) == MandateActive, nil
}

// lockMandate locks the org's mandate id through tx, with the database's
// now; found is false when there is none (or tx's store keeps no
// mandates).
func lockMandate(ctx context.Context, tx Tx, org, id string) (m Mandate, now time.Time, found bool, err error) {
	locker, ok := tx.(mandateLocker)
	if !ok {
		return Mandate{}, time.Time{}, false, nil
	}
	m, now, err = locker.LockMandate(ctx, org, id)
	if errors.Is(err, ErrNotFound) {
		return Mandate{}, time.Time{}, false, nil
	}
	if err != nil {
		return Mandate{}, time.Time{}, false, fmt.Errorf("lock mandate: %w", err)
	}
	return m, now, true, nil
}

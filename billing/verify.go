package billing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The verify level (contract §10) closes the hole the two-call handshake
// leaves: the token goes back to the agent, so an agent that is buggy or
// manipulated can make the second call by itself. Under verify the second
// call executes only once the person who asked (the confirmation's sub)
// authenticated at the identity provider after the confirmation was issued,
// which no agent can do on the person's behalf:
//
//   - step-up (RFC 9470): the second call's access token carries an
//     auth_time at or after the confirmation's creation (less the allowed
//     clock skew) and, when VERIFY_ACR_VALUES is set, one of those acr
//     values; or
//   - the verification page: the person signed in afresh (OIDC, max_age=0)
//     at verify_url, saw the summary and pressed Confirm, which recorded a
//     Verification on the confirmation.
//
// Otherwise the second call gets insufficient_user_authentication with the
// page's address, and the confirmation stays pending.

// Person is someone who has just signed in at the identity provider on a
// billingd page, as the ID token and access token of that sign-in say.
type Person struct {
	Subject   string // sub
	Org       string // the access token's org claim
	Auth      Authentication
	Client    string // the page's OIDC client, for the audit log
	RequestID string
}

func (p Person) caller() Caller {
	return Caller{Org: p.Org, Principal: p.Subject, Client: p.Client, RequestID: p.RequestID,
		AuthTime: p.Auth.AuthTime, ACR: p.Auth.ACR, Session: true}
}

// verifyURL is the verification page of a confirmation.
func (s *Service) verifyURL(id string) string {
	return s.publicBaseURL + "/verify/" + id
}

// VerifyACRValues are the acr values the verify level accepts (empty: any).
func (s *Service) VerifyACRValues() []string { return slices.Clone(s.acrValues) }

// freshEnough reports whether an authentication satisfies the verify level
// for a confirmation created at createdAt: at or after it, less the clock
// skew billingd allows, and with an accepted acr.
func (s *Service) freshEnough(a Authentication, createdAt time.Time) bool {
	if a.AuthTime.IsZero() || a.AuthTime.Before(createdAt.Add(-s.skew).Truncate(time.Second)) {
		return false
	}
	return len(s.acrValues) == 0 || slices.Contains(s.acrValues, a.ACR)
}

// errVerificationRequired is the answer to a second call that the verify
// level holds back.
func (s *Service) errVerificationRequired(c Confirmation) *Error {
	url := s.verifyURL(c.ID)
	return &Error{Code: CodeInsufficientUserAuthentication,
		Message: "this change needs the person who asked for it to sign in again: open " + url +
			" to confirm it there, or retry with an access token from a fresh sign-in",
		StepUp: &StepUp{VerifyURL: url, ACRValues: slices.Clone(s.acrValues)}}
}

// checkVerified holds the verify level for a second call: nil when the
// confirmation needs no verification or has one; otherwise a Verification
// made by the caller's step-up token (to be recorded; a zero now records
// the database's), or the refusal.
func (s *Service) checkVerified(c Confirmation, caller Caller, now time.Time) (*Verification, *Error) {
	if !c.VerifyRequired || c.Verification != nil {
		return nil, nil
	}
	auth := Authentication{AuthTime: caller.AuthTime, ACR: caller.ACR}
	// LockByToken only finds the caller's own confirmations; the principal
	// check says so here too, for whoever moves that lookup.
	if caller.Principal != c.Principal || !s.freshEnough(auth, c.CreatedAt) {
		return nil, s.errVerificationRequired(c)
	}
	return &Verification{VerifiedAt: now, Method: VerifiedByStepUp, Authentication: auth}, nil
}

// requireVerification is the verify level in the execution-time policy
// decision: the second call goes on only with a recorded verification or a
// step-up token, which is then recorded in the same transaction. A
// confirmation the policy came to put under verify after it was issued is
// marked so, for the verification page. A step-up verification is set on c
// as recorded (at now, the transaction's database time), for the receipt.
func (s *Service) requireVerification(ctx context.Context, tx Tx, caller Caller, c *Confirmation, now time.Time) (refused error, err error) {
	marked := c.VerifyRequired
	c.VerifyRequired = true
	v, refusal := s.checkVerified(*c, caller, now)
	if v != nil {
		c.Verification = v
	}
	switch {
	case refusal != nil && !marked:
		return refusal, tx.Record(ctx, Record{ConfirmationID: c.ID, RequireVerification: true})
	case refusal != nil:
		return refusal, nil
	case v != nil:
		ev := s.event(caller, c.Operation, EventUserVerified, c.ID, VerifiedByStepUp)
		return nil, tx.Record(ctx, Record{ConfirmationID: c.ID, RequireVerification: !marked, Verification: v,
			Events: []AuditEvent{ev}})
	}
	return nil, nil
}

// VerificationView is what the verification page shows the person who
// signed in for it.
func (s *Service) VerificationView(ctx context.Context, p Person, id string) (ConfirmationView, error) {
	var view ConfirmationView
	outcome, err := s.inVerification(ctx, p, id, func(_ Tx, c Confirmation, _ time.Time) error {
		view = viewOfConfirmation(c)
		return nil
	})
	if err != nil {
		return ConfirmationView{}, storeError("read confirmation", err)
	}
	return view, outcome
}

// Verify records the person's answer on the verification page: agree
// records the verification (USER_VERIFIED, in the same transaction), so the
// agent's second call can execute; otherwise the confirmation is cancelled
// (TOKEN_REVOKED, reason declined) and can never execute.
func (s *Service) Verify(ctx context.Context, p Person, id string, agree bool) (ConfirmationView, error) {
	var view ConfirmationView
	outcome, err := s.inVerification(ctx, p, id, func(tx Tx, c Confirmation, now time.Time) (err error) {
		view, err = s.recordVerification(ctx, tx, p, c, now, agree)
		return err
	})
	if err != nil {
		return ConfirmationView{}, storeError("record verification", err)
	}
	return view, outcome
}

// inVerification runs fn in a transaction on the person's confirmation id,
// locked, once the rules of the verification page hold; otherwise outcome
// is the public refusal. err is a failure of the store (or of fn).
func (s *Service) inVerification(ctx context.Context, p Person, id string,
	fn func(tx Tx, c Confirmation, now time.Time) error) (outcome, err error) {
	err = s.store.InTx(ctx, func(tx Tx) error {
		c, now, err := s.lockForVerification(ctx, tx, p, id)
		var refusal *Error
		if errors.As(err, &refusal) { // not found: answered, nothing to roll back
			outcome = err
			return nil
		}
		if err != nil { // the store failed: roll back, answer with storeError
			return err
		}
		if outcome = s.checkVerifiable(*c, p, now); outcome != nil {
			return nil
		}
		return fn(tx, *c, now)
	})
	return outcome, err
}

// lockForVerification locks the person's org's confirmation id. An unknown
// or malformed id is a public *Error (not_found); any other error is the
// store's.
func (s *Service) lockForVerification(ctx context.Context, tx Tx, p Person, id string) (*Confirmation, time.Time, error) {
	if !WellFormedConfirmationID(id) || p.Org == "" {
		return nil, time.Time{}, Errorf(CodeNotFound, "confirmation not found")
	}
	c, now, err := tx.LockByID(ctx, p.Org, id)
	if errors.Is(err, ErrNotFound) {
		return nil, time.Time{}, Errorf(CodeNotFound, "confirmation not found")
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock confirmation: %w", err)
	}
	return &c, now, nil
}

// checkVerifiable holds the rules of the verification page: only the person
// who asked, signed in after the confirmation was issued (with an accepted
// acr), for a pending confirmation that needs verification and has not
// expired. Nothing about another person's confirmation is shown.
func (s *Service) checkVerifiable(c Confirmation, p Person, now time.Time) error {
	switch {
	case c.Principal != p.Subject:
		return Errorf(CodeOperationDenied, "only the person who asked for this change can verify it; sign in as that person")
	case !c.VerifyRequired:
		return Errorf(CodeInvalidRequest, "this change does not need verification")
	case c.Status != StatusPending:
		return Errorf(CodeTokenInvalid, "this change is no longer pending: it was made, cancelled or replaced")
	case now.After(c.ExpiresAt.Add(s.skew)):
		return errTokenExpired()
	case !s.freshEnough(p.Auth, c.CreatedAt):
		return s.errVerificationRequired(c)
	}
	return nil
}

func (s *Service) recordVerification(ctx context.Context, tx Tx, p Person, c Confirmation, now time.Time, agree bool) (ConfirmationView, error) {
	if !agree {
		ev := s.event(p.caller(), c.Operation, EventTokenRevoked, c.ID, "declined")
		c.Status = StatusCancelled
		return viewOfConfirmation(c), tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusCancelled, Events: []AuditEvent{ev}})
	}
	if c.Verification != nil { // confirming twice changes nothing
		return viewOfConfirmation(c), nil
	}
	v := &Verification{VerifiedAt: now, Method: VerifiedByPage, Authentication: p.Auth}
	ev := s.event(p.caller(), c.Operation, EventUserVerified, c.ID, VerifiedByPage)
	c.Verification = v
	return viewOfConfirmation(c), tx.Record(ctx, Record{ConfirmationID: c.ID, Verification: v, Events: []AuditEvent{ev}})
}

package billingtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/billingd/billingd/billing"
)

// State is everything a Store holds. Store.InTx works on a copy and swaps it
// in only when its function succeeds, so a failed transaction leaves no trace.
type State struct {
	Accounts      map[string]billing.Account      // by org id
	Confirmations map[string]billing.Confirmation // by confirmation id
	Audit         []billing.AuditEvent            // oldest first
	Events        map[string]bool                 // provider event ids processed
	AttemptedAt   map[string]time.Time            // by confirmation id: when its attempt was recorded
}

func (s State) clone() State {
	return State{
		Accounts:      maps.Clone(s.Accounts),
		Confirmations: maps.Clone(s.Confirmations),
		Audit:         slices.Clone(s.Audit),
		Events:        maps.Clone(s.Events),
		AttemptedAt:   maps.Clone(s.AttemptedAt),
	}
}

// Store is an in-memory billing.Store for the handshake's unit tests. Its
// clock, the "database clock", stands still at the time it was made with
// until Advance moves it. Transactions are serialized by one mutex, which
// stands in for the row locks. RunStoreContract checks it behaves as the
// PostgreSQL store does.
type Store struct {
	// RecordErr, when set, is called by every Tx.Record; a non-nil result
	// fails the Record (after its writes were made to the transaction's
	// copy), as a commit that fails would. Set it before the store is used.
	RecordErr func(billing.Record) error
	// CountErr, when set, fails every Tx.ExecutedSince (a database blink).
	// Set it before the store is used.
	CountErr error
	// RecoveryPointErr, when set, fails every Tx.SaveRecoveryPoint before
	// it commits. Set it before the store is used.
	RecoveryPointErr error

	mu        sync.Mutex
	now       time.Time
	state     State
	nextAudit int64
}

var _ billing.Store = (*Store)(nil)

// NewStore returns a store whose clock reads now, holding accounts.
func NewStore(now time.Time, accounts ...billing.Account) *Store {
	s := &Store{now: now, state: State{Accounts: map[string]billing.Account{}, Confirmations: map[string]billing.Confirmation{},
		AttemptedAt: map[string]time.Time{}}}
	for _, a := range accounts {
		s.state.Accounts[a.Org.ID] = a
	}
	return s
}

// Advance moves the store's clock forward by d.
func (s *Store) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// Snapshot returns a copy of what the store holds now.
func (s *Store) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.clone()
}

// Update changes what the store holds, outside any transaction: how a test
// arranges a state the service would not make itself (another writer's
// change, a policy set by hand).
func (s *Store) Update(edit func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	edit(&s.state)
}

func (s *Store) appendAudit(st *State, events ...billing.AuditEvent) {
	for _, e := range events {
		s.nextAudit++
		e.ID, e.At = s.nextAudit, s.now
		st.Audit = append(st.Audit, e)
	}
}

// Account implements billing.Store.
func (s *Store) Account(_ context.Context, org string) (billing.Account, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.state.Accounts[org]
	if !ok {
		return billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	a.Unsettled = s.state.executing(org, "")
	return a, s.now, nil
}

// AccountForCall implements billing.Store.
func (s *Store) AccountForCall(ctx context.Context, org, principal string, window time.Duration) (billing.Account, billing.Activity, error) {
	a, now, err := s.Account(ctx, org)
	if err != nil {
		return billing.Account{}, billing.Activity{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	activity := billing.Activity{Now: now}
	if window > 0 {
		activity = s.state.activity(org, principal, now, window)
	}
	return a, activity, nil
}

// executing reports whether a confirmation of org other than except is
// executing.
func (s State) executing(org, except string) bool {
	for _, c := range s.Confirmations {
		if c.Org == org && c.ID != except && c.Status == billing.StatusExecuting {
			return true
		}
	}
	return false
}

// IssueConfirmation implements billing.Store.
func (s *Store) IssueConfirmation(_ context.Context, c billing.Confirmation, ttl time.Duration, template billing.AuditEvent) (billing.Confirmation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.executing(c.Org, "") || s.state.Accounts[c.Org].Subscription.Version != c.Terms.SubscriptionVer {
		return billing.Confirmation{}, fmt.Errorf("issue confirmation: %w", billing.ErrConflict)
	}
	for id, old := range s.state.Confirmations {
		if old.Status == billing.StatusPending && old.Org == c.Org && old.Principal == c.Principal && old.Operation == c.Operation {
			old.Status = billing.StatusSuperseded
			s.state.Confirmations[id] = old
			ev := template
			ev.Event, ev.ConfirmationID, ev.Outcome, ev.Reason = billing.EventTokenRevoked, id, "revoked", "superseded"
			s.appendAudit(&s.state, ev)
		}
	}
	c.CreatedAt, c.ExpiresAt = s.now, s.now.Add(ttl)
	c.ApprovalsRequired, c.Approvers = max(c.ApprovalsRequired, 1), nil // as the database's defaults
	s.state.Confirmations[c.ID] = c
	ev := template
	ev.ConfirmationID = c.ID
	s.appendAudit(&s.state, ev)
	return c, nil
}

// InTx implements billing.Store: fn works on a copy of the state, swapped in
// only when fn succeeds.
func (s *Store) InTx(_ context.Context, fn func(billing.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	work := s.state.clone()
	if err := fn(&tx{store: s, state: &work}); err != nil {
		return err
	}
	s.state = work
	return nil
}

// PendingConfirmations implements billing.Store.
func (s *Store) PendingConfirmations(_ context.Context, org, principal string) ([]billing.Confirmation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []billing.Confirmation
	for _, c := range s.state.Confirmations {
		if c.Org == org && c.Status == billing.StatusPending && !s.now.After(c.ExpiresAt) && (principal == "" || c.Principal == principal) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b billing.Confirmation) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// AuditEvents implements billing.Store.
func (s *Store) AuditEvents(_ context.Context, org string, limit int, before int64) ([]billing.AuditEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []billing.AuditEvent
	for _, e := range slices.Backward(s.state.Audit) {
		if e.Org == org && (before == 0 || e.ID < before) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// AppendAudit implements billing.Store.
func (s *Store) AppendAudit(_ context.Context, events ...billing.AuditEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendAudit(&s.state, events...)
	return nil
}

func (s State) activity(org, principal string, now time.Time, window time.Duration) billing.Activity {
	a := billing.Activity{Now: now}
	for _, e := range s.Audit {
		if e.Org != org || e.Principal != principal || !e.At.After(now.Add(-window)) {
			continue
		}
		switch e.Event {
		case billing.EventTokenIssued, billing.EventOperationDenied:
			if e.Event == billing.EventOperationDenied && (e.ConfirmationID != "" || e.Reason == billing.ReasonPersonRequired) {
				continue // a denial at execution, or a refused loosening: no first call
			}
			if a.Issued++; a.OldestIssued.IsZero() {
				a.OldestIssued = e.At
			}
		case billing.EventTokenRejected:
			if a.Rejected++; a.OldestRejected.IsZero() {
				a.OldestRejected = e.At
			}
		}
	}
	return a
}

// ExecutedSince implements billing.Store.
func (s *Store) ExecutedSince(_ context.Context, org string, window time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.executedSince(org, s.now.Add(-window)), nil
}

func (s State) executedSince(org string, since time.Time) int {
	n := 0
	for _, e := range s.Audit {
		if e.Org == org && e.Event == billing.EventOperationExecuted && e.At.After(since) {
			n++
		}
	}
	return n
}

// CreateAccount implements billing.Store.
func (s *Store) CreateAccount(_ context.Context, a billing.Account) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.state.Accounts[a.Org.ID]; ok {
		return errors.New("duplicate org")
	}
	s.state.Accounts[a.Org.ID] = a
	return nil
}

// tx runs inside Store.InTx, with the store's mutex held.
type tx struct {
	store *Store
	state *State
}

func (tx *tx) LockByToken(_ context.Context, org, principal string, tokenHash []byte) (billing.Confirmation, billing.Account, time.Time, error) {
	for _, c := range tx.state.Confirmations {
		// No hash (a malformed token's, lookupKey) is no token's: as in
		// SQL, where NULL equals nothing.
		if len(tokenHash) > 0 && bytes.Equal(c.TokenHash, tokenHash) && c.Org == org && c.Principal == principal {
			a := tx.state.Accounts[org]
			a.Unsettled = tx.state.executing(org, c.ID)
			return c, a, tx.store.now, nil
		}
	}
	return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
}

// ReadActivity implements billing.Tx: read at once, under the store's lock.
func (tx *tx) ReadActivity(org, principal string, window time.Duration, into *billing.Activity) {
	*into = tx.state.activity(org, principal, tx.store.now, window)
}

// SaveRecoveryPoint implements billing.Tx: the transaction's state so far,
// with the confirmation executing, becomes the store's (committed), and the
// transaction goes on from there.
func (tx *tx) SaveRecoveryPoint(ctx context.Context, confirmationID string, attempt int, consent *billing.Consent) (billing.Confirmation, billing.Account, time.Time, error) {
	c, ok := tx.state.Confirmations[confirmationID]
	if !ok {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	if consent != nil {
		k := *consent
		c.Consent = &k
	}
	c.Status, c.Attempt, c.AttemptedAt = billing.StatusExecuting, attempt, tx.store.now
	if c.SentAt.IsZero() {
		c.SentAt = tx.store.now
	}
	tx.state.Confirmations[confirmationID] = c
	tx.state.AttemptedAt[confirmationID] = tx.store.now
	if tx.store.RecoveryPointErr != nil {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, tx.store.RecoveryPointErr
	}
	tx.store.state = tx.state.clone()
	a := tx.state.Accounts[c.Org]
	a.Unsettled = tx.state.executing(c.Org, c.ID)
	return c, a, tx.store.now, nil
}

// LockUnsettled implements billing.Tx: the oldest attempt first, as the
// PostgreSQL store orders them.
func (tx *tx) LockUnsettled(_ context.Context, idle time.Duration, skip []string) (billing.Confirmation, billing.Account, time.Time, error) {
	ids := slices.SortedFunc(maps.Keys(tx.state.Confirmations), func(a, b string) int {
		if c := tx.state.AttemptedAt[a].Compare(tx.state.AttemptedAt[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, id := range ids {
		c := tx.state.Confirmations[id]
		if slices.Contains(skip, c.ID) {
			continue
		}
		// Not after (rather than before): the fake's clock stands still, and
		// a transaction later than the attempt must see it as idle, as the
		// database's does (the store contract checks this).
		if c.Status == billing.StatusExecuting && !tx.state.AttemptedAt[c.ID].After(tx.store.now.Add(-idle)) {
			return c, tx.state.Accounts[c.Org], tx.store.now, nil
		}
	}
	return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
}

// LockOwedRestore implements billing.Tx: the longest owed first.
func (tx *tx) LockOwedRestore(_ context.Context, skip []string) (billing.Confirmation, billing.Account, time.Time, error) {
	var owed []billing.Confirmation
	for _, c := range tx.state.Confirmations {
		if c.Restore.Owed && !slices.Contains(skip, c.ID) {
			owed = append(owed, c)
		}
	}
	if len(owed) == 0 {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	c := slices.MinFunc(owed, func(a, b billing.Confirmation) int {
		if n := a.Restore.Since.Compare(b.Restore.Since); n != 0 {
			return n
		}
		return strings.Compare(a.ID, b.ID)
	})
	return c, tx.state.Accounts[c.Org], tx.store.now, nil
}

// LockLapsedApproval implements billing.Tx: the longest lapsed first.
func (tx *tx) LockLapsedApproval(_ context.Context, skew time.Duration, skip []string) (billing.Confirmation, time.Time, error) {
	var lapsed []billing.Confirmation
	for _, c := range tx.state.Confirmations {
		if c.Status == billing.StatusPending && c.Approval == billing.ApprovalPending &&
			c.ExpiresAt.Before(tx.store.now.Add(-skew)) && !slices.Contains(skip, c.ID) {
			lapsed = append(lapsed, c)
		}
	}
	if len(lapsed) == 0 {
		return billing.Confirmation{}, time.Time{}, billing.ErrNotFound
	}
	c := slices.MinFunc(lapsed, func(a, b billing.Confirmation) int {
		if n := a.ExpiresAt.Compare(b.ExpiresAt); n != 0 {
			return n
		}
		return strings.Compare(a.ID, b.ID)
	})
	return c, tx.store.now, nil
}

func (tx *tx) ExecutedSince(_ context.Context, org string, window time.Duration) (int, error) {
	if tx.store.CountErr != nil {
		return 0, tx.store.CountErr
	}
	return tx.state.executedSince(org, tx.store.now.Add(-window)), nil
}

func (tx *tx) LockByID(_ context.Context, org, id string) (billing.Confirmation, time.Time, error) {
	c, ok := tx.state.Confirmations[id]
	if !ok || c.Org != org {
		return billing.Confirmation{}, time.Time{}, billing.ErrNotFound
	}
	return c, tx.store.now, nil
}

func (tx *tx) LockSubscription(_ context.Context, stripeSubscriptionID string) (billing.Account, error) {
	for _, a := range tx.state.Accounts {
		if a.Subscription.StripeSubscriptionID == stripeSubscriptionID {
			return a, nil
		}
	}
	return billing.Account{}, billing.ErrNotFound
}

func (tx *tx) LockDueScheduled(_ context.Context, grace time.Duration, skip []string) (billing.Account, error) {
	for _, a := range tx.state.Accounts {
		sub, cutoff := a.Subscription, tx.store.now.Add(-grace)
		due := sub.Scheduled != nil && sub.Scheduled.At.Before(cutoff) ||
			sub.CancelAtPeriodEnd && sub.Status != "canceled" && sub.CurrentPeriodEnd.Before(cutoff)
		if due && !slices.Contains(skip, sub.StripeSubscriptionID) {
			return a, nil
		}
	}
	return billing.Account{}, billing.ErrNotFound
}

func (tx *tx) LockPending(_ context.Context, org string) ([]billing.Confirmation, error) {
	var out []billing.Confirmation
	for _, c := range tx.state.Confirmations {
		if c.Org == org && c.Status == billing.StatusPending {
			out = append(out, c)
		}
	}
	return out, nil
}

func (tx *tx) SavePolicy(_ context.Context, org string, p billing.Policy, _ string) error {
	a, ok := tx.state.Accounts[org]
	if !ok {
		return billing.ErrNotFound
	}
	a.Policy = p
	tx.state.Accounts[org] = a
	return nil
}

func (tx *tx) MarkEventProcessed(_ context.Context, eventID string) (bool, error) {
	if tx.state.Events[eventID] {
		return false, nil
	}
	if tx.state.Events == nil {
		tx.state.Events = map[string]bool{}
	}
	tx.state.Events[eventID] = true
	return true, nil
}

func (tx *tx) Record(_ context.Context, r billing.Record) error {
	if r.ConfirmationID != "" && r.Status != "" {
		c, ok := tx.state.Confirmations[r.ConfirmationID]
		if !ok {
			return fmt.Errorf("record: confirmation %s: %w", r.ConfirmationID, billing.ErrNotFound)
		}
		c.Status = r.Status
		if r.Failure != "" {
			c.Failure = r.Failure
		}
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.Approval != nil {
		c := tx.state.Confirmations[r.ConfirmationID]
		c.Approval, c.Approver, c.ApproverAuth = r.Approval.State, r.Approval.Approver, r.Approval.Auth
		if r.Approval.Approvers != nil {
			c.Approvers = slices.Clone(r.Approval.Approvers)
		}
		if r.Approval.Required != 0 {
			c.ApprovalsRequired = r.Approval.Required
		}
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.Agent {
		c := tx.state.Confirmations[r.ConfirmationID]
		c.Agent = true
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.RequireVerification || r.Verification != nil {
		c := tx.state.Confirmations[r.ConfirmationID]
		c.VerifyRequired = c.VerifyRequired || r.RequireVerification
		if v := r.Verification; v != nil {
			recorded := *v
			if recorded.VerifiedAt.IsZero() {
				recorded.VerifiedAt = tx.store.now
			}
			c.Verification = &recorded
		}
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.Attempt != nil {
		c := tx.state.Confirmations[r.ConfirmationID]
		c.Attempt, c.AttemptedAt = *r.Attempt, tx.store.now
		tx.state.Confirmations[r.ConfirmationID] = c
		tx.state.AttemptedAt[r.ConfirmationID] = tx.store.now
	}
	if d := r.Restore; d != nil {
		c := tx.state.Confirmations[r.ConfirmationID]
		since := c.Restore.Since
		if d.Owed && since.IsZero() {
			since = tx.store.now
		}
		c.Restore = billing.RestoreDebt{Owed: d.Owed, Tries: d.Tries, Since: since, Settled: d.Settled}
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.Result != nil {
		c := tx.state.Confirmations[r.ConfirmationID]
		c.Result = r.Result
		tx.state.Confirmations[r.ConfirmationID] = c
	}
	if r.Subscription != nil {
		a := tx.state.Accounts[r.Subscription.Org]
		sub := *r.Subscription
		sub.Version = a.Subscription.Version + 1
		a.Subscription = sub
		tx.state.Accounts[sub.Org] = a
	}
	if r.SyncedSubscription != nil {
		a := tx.state.Accounts[r.SyncedSubscription.Org]
		a.Subscription.SyncedAt = r.SyncedSubscription.SyncedAt
		tx.state.Accounts[a.Subscription.Org] = a
	}
	tx.store.appendAudit(tx.state, r.Events...)
	if tx.store.RecordErr != nil {
		return tx.store.RecordErr(r)
	}
	return nil
}

package billing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- fake store -------------------------------------------------------------

// memState is everything the fake store holds. InTx works on a copy and
// swaps it in only when fn succeeds, so a failed transaction leaves no trace.
type memState struct {
	accounts      map[string]Account
	confirmations map[string]Confirmation // by id
	audit         []AuditEvent
	events        map[string]bool      // provider event ids processed
	attemptedAt   map[string]time.Time // by confirmation id
}

func (s memState) clone() memState {
	return memState{
		accounts:      maps.Clone(s.accounts),
		confirmations: maps.Clone(s.confirmations),
		audit:         slices.Clone(s.audit),
		events:        maps.Clone(s.events),
		attemptedAt:   maps.Clone(s.attemptedAt),
	}
}

// memStore is an in-memory Store. Its clock is now, the "database clock".
// Transactions are serialized by mu, which stands in for the row locks.
type memStore struct {
	mu    sync.Mutex
	now   time.Time
	state memState
	// recordErr, when set, is called by every Tx.Record; a non-nil result
	// fails the Record (after its writes were made to the transaction's copy).
	recordErr func(Record) error
	// countErr, when set, fails every ExecutedSince (a database blink).
	countErr  error
	nextAudit int64
}

func newMemStore(now time.Time, accounts ...Account) *memStore {
	s := &memStore{now: now, state: memState{accounts: map[string]Account{}, confirmations: map[string]Confirmation{},
		attemptedAt: map[string]time.Time{}}}
	for _, a := range accounts {
		s.state.accounts[a.Org.ID] = a
	}
	return s
}

func (s *memStore) advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

func (s *memStore) snapshot() memState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.clone()
}

func (s *memStore) appendAudit(st *memState, events ...AuditEvent) {
	for _, e := range events {
		s.nextAudit++
		e.ID, e.At = s.nextAudit, s.now
		st.audit = append(st.audit, e)
	}
}

func (s *memStore) Account(_ context.Context, org string) (Account, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.state.accounts[org]
	if !ok {
		return Account{}, time.Time{}, ErrNotFound
	}
	a.Unsettled = s.state.executing(org, "")
	return a, s.now, nil
}

// executing reports whether a confirmation of org other than except is
// executing.
func (s memState) executing(org, except string) bool {
	for _, c := range s.confirmations {
		if c.Org == org && c.ID != except && c.Status == StatusExecuting {
			return true
		}
	}
	return false
}

func (s *memStore) IssueConfirmation(_ context.Context, c Confirmation, ttl time.Duration, template AuditEvent) (Confirmation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.state.confirmations {
		if old.Status == StatusPending && old.Org == c.Org && old.Principal == c.Principal && old.Operation == c.Operation {
			old.Status = StatusSuperseded
			s.state.confirmations[id] = old
			ev := template
			ev.Event, ev.ConfirmationID, ev.Outcome, ev.Reason = EventTokenRevoked, id, "revoked", "superseded"
			s.appendAudit(&s.state, ev)
		}
	}
	c.CreatedAt, c.ExpiresAt = s.now, s.now.Add(ttl)
	s.state.confirmations[c.ID] = c
	ev := template
	ev.ConfirmationID = c.ID
	s.appendAudit(&s.state, ev)
	return c, nil
}

func (s *memStore) InTx(_ context.Context, fn func(Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	work := s.state.clone()
	if err := fn(&memTx{store: s, state: &work}); err != nil {
		return err
	}
	s.state = work
	return nil
}

func (s *memStore) PendingConfirmations(_ context.Context, org, principal string) ([]Confirmation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Confirmation
	for _, c := range s.state.confirmations {
		if c.Org == org && c.Status == StatusPending && !s.now.After(c.ExpiresAt) && (principal == "" || c.Principal == principal) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Confirmation) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

func (s *memStore) AuditEvents(_ context.Context, org string, limit int, before int64) ([]AuditEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AuditEvent
	for _, e := range slices.Backward(s.state.audit) {
		if e.Org == org && (before == 0 || e.ID < before) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *memStore) AppendAudit(_ context.Context, events ...AuditEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendAudit(&s.state, events...)
	return nil
}

func (s *memStore) RecentActivity(_ context.Context, org, principal string, window time.Duration) (Activity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := Activity{Now: s.now}
	for _, e := range s.state.audit {
		if e.Org != org || e.Principal != principal || !e.At.After(s.now.Add(-window)) {
			continue
		}
		switch e.Event {
		case EventTokenIssued, EventOperationDenied:
			if e.Event == EventOperationDenied && e.ConfirmationID != "" {
				continue
			}
			if a.Issued++; a.OldestIssued.IsZero() {
				a.OldestIssued = e.At
			}
		case EventTokenRejected:
			if a.Rejected++; a.OldestRejected.IsZero() {
				a.OldestRejected = e.At
			}
		}
	}
	return a, nil
}

func (s *memStore) ExecutedSince(_ context.Context, org string, window time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.executedSince(org, s.now.Add(-window)), nil
}

func (s memState) executedSince(org string, since time.Time) int {
	n := 0
	for _, e := range s.audit {
		if e.Org == org && e.Event == EventOperationExecuted && e.At.After(since) {
			n++
		}
	}
	return n
}

func (s *memStore) CreateAccount(_ context.Context, a Account) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.state.accounts[a.Org.ID]; ok {
		return errors.New("duplicate org")
	}
	s.state.accounts[a.Org.ID] = a
	return nil
}

// memTx runs inside memStore.InTx, with the store's mutex held.
type memTx struct {
	store *memStore
	state *memState
}

func (tx *memTx) LockByToken(_ context.Context, org, principal string, tokenHash []byte) (Confirmation, Account, time.Time, error) {
	for _, c := range tx.state.confirmations {
		if bytes.Equal(c.TokenHash, tokenHash) && c.Org == org && c.Principal == principal {
			a := tx.state.accounts[org]
			a.Unsettled = tx.state.executing(org, c.ID)
			return c, a, tx.store.now, nil
		}
	}
	return Confirmation{}, Account{}, time.Time{}, ErrNotFound
}

func (tx *memTx) LockUnsettled(_ context.Context, idle time.Duration) (Confirmation, Account, time.Time, error) {
	for _, c := range tx.state.confirmations {
		// Not after (rather than before): the fake's clock stands still, and
		// a transaction later than the attempt must see it as idle, as the
		// database's does (the store contract checks this).
		if c.Status == StatusExecuting && !tx.state.attemptedAt[c.ID].After(tx.store.now.Add(-idle)) {
			return c, tx.state.accounts[c.Org], tx.store.now, nil
		}
	}
	return Confirmation{}, Account{}, time.Time{}, ErrNotFound
}

func (tx *memTx) ExecutedSince(_ context.Context, org string, window time.Duration) (int, error) {
	if tx.store.countErr != nil {
		return 0, tx.store.countErr
	}
	return tx.state.executedSince(org, tx.store.now.Add(-window)), nil
}

func (tx *memTx) LockByID(_ context.Context, org, id string) (Confirmation, time.Time, error) {
	c, ok := tx.state.confirmations[id]
	if !ok || c.Org != org {
		return Confirmation{}, time.Time{}, ErrNotFound
	}
	return c, tx.store.now, nil
}

func (tx *memTx) LockSubscription(_ context.Context, stripeSubscriptionID string) (Account, error) {
	for _, a := range tx.state.accounts {
		if a.Subscription.StripeSubscriptionID == stripeSubscriptionID {
			return a, nil
		}
	}
	return Account{}, ErrNotFound
}

func (tx *memTx) LockPending(_ context.Context, org string) ([]Confirmation, error) {
	var out []Confirmation
	for _, c := range tx.state.confirmations {
		if c.Org == org && c.Status == StatusPending {
			out = append(out, c)
		}
	}
	return out, nil
}

func (tx *memTx) SavePolicy(_ context.Context, org string, p Policy, _ string) error {
	a, ok := tx.state.accounts[org]
	if !ok {
		return ErrNotFound
	}
	a.Policy = p
	tx.state.accounts[org] = a
	return nil
}

func (tx *memTx) MarkEventProcessed(_ context.Context, eventID string) (bool, error) {
	if tx.state.events[eventID] {
		return false, nil
	}
	if tx.state.events == nil {
		tx.state.events = map[string]bool{}
	}
	tx.state.events[eventID] = true
	return true, nil
}

func (tx *memTx) Record(_ context.Context, r Record) error {
	if r.ConfirmationID != "" && r.Status != "" {
		c, ok := tx.state.confirmations[r.ConfirmationID]
		if !ok {
			return fmt.Errorf("record: confirmation %s: %w", r.ConfirmationID, ErrNotFound)
		}
		c.Status = r.Status
		tx.state.confirmations[r.ConfirmationID] = c
	}
	if r.Approval != nil {
		c := tx.state.confirmations[r.ConfirmationID]
		c.Approval, c.Approver, c.ApproverAuth = r.Approval.State, r.Approval.Approver, r.Approval.Auth
		tx.state.confirmations[r.ConfirmationID] = c
	}
	if r.RequireVerification || r.Verification != nil {
		c := tx.state.confirmations[r.ConfirmationID]
		c.VerifyRequired = c.VerifyRequired || r.RequireVerification
		if v := r.Verification; v != nil {
			recorded := *v
			if recorded.VerifiedAt.IsZero() {
				recorded.VerifiedAt = tx.store.now
			}
			c.Verification = &recorded
		}
		tx.state.confirmations[r.ConfirmationID] = c
	}
	if r.Attempt != nil {
		c := tx.state.confirmations[r.ConfirmationID]
		c.Attempt = *r.Attempt
		tx.state.confirmations[r.ConfirmationID] = c
		tx.state.attemptedAt[r.ConfirmationID] = tx.store.now
	}
	if r.Result != nil {
		c := tx.state.confirmations[r.ConfirmationID]
		c.Result = r.Result
		tx.state.confirmations[r.ConfirmationID] = c
	}
	if r.Subscription != nil {
		a := tx.state.accounts[r.Subscription.Org]
		sub := *r.Subscription
		sub.Version = a.Subscription.Version + 1
		a.Subscription = sub
		tx.state.accounts[sub.Org] = a
	}
	if r.SyncedSubscription != nil {
		a := tx.state.accounts[r.SyncedSubscription.Org]
		a.Subscription.SyncedAt = r.SyncedSubscription.SyncedAt
		tx.state.accounts[a.Subscription.Org] = a
	}
	tx.store.appendAudit(tx.state, r.Events...)
	if tx.store.recordErr != nil {
		return tx.store.recordErr(r)
	}
	return nil
}

// ---- fake payment provider --------------------------------------------------

type applyCall struct {
	change PlanChange
	key    string
}

// memProvider is a PaymentProvider that honours idempotency keys: a key that
// already succeeded returns the stored result without changing anything again.
type memProvider struct {
	mu         sync.Mutex
	preview    Preview
	previewErr error
	previews   []PlanChange
	applyErrs  []error // returned by successive ApplyPlanChange calls; nil or exhausted: success
	calls      []applyCall
	done       map[string]AppliedChange // idempotency key → result
	changes    int                      // subscription changes actually made
	periodEnd  time.Time
	readState  ProviderSubscription
	readErr    error
}

func (p *memProvider) PreviewPlanChange(_ context.Context, change PlanChange) (Preview, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.previews = append(p.previews, change)
	return p.preview, p.previewErr
}

func (p *memProvider) ApplyPlanChange(_ context.Context, change PlanChange, key string) (AppliedChange, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, applyCall{change, key})
	if len(p.applyErrs) > 0 {
		err := p.applyErrs[0]
		p.applyErrs = p.applyErrs[1:]
		if err != nil {
			return AppliedChange{}, err
		}
	}
	if r, ok := p.done[key]; ok {
		return r, nil
	}
	if p.done == nil {
		p.done = map[string]AppliedChange{}
	}
	p.changes++
	r := AppliedChange{Status: "active", CurrentPeriodEnd: p.periodEnd, ItemID: "si_new"}
	p.done[key] = r
	return r, nil
}

// ReadSubscription answers readState, or readErr.
func (p *memProvider) ReadSubscription(context.Context, string) (ProviderSubscription, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readState, p.readErr
}

func (p *memProvider) CreateCustomer(context.Context, NewCustomer, string) (CreatedCustomer, error) {
	return CreatedCustomer{}, errors.New("memProvider: CreateCustomer not implemented")
}

func (p *memProvider) applyCalls() []applyCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// ---- fixture --------------------------------------------------------------------

var (
	// dbNow is the fake database's clock; the fraction checks that the
	// proration date is cut to whole seconds.
	dbNow     = time.Date(2026, 5, 12, 10, 0, 0, 500_000_000, time.UTC)
	periodEnd = time.Date(2026, 5, 30, 0, 0, 0, 0, time.UTC)
	alice     = Caller{Org: "org_vb", Principal: "alice", Client: "agent-1", RequestID: "req-1"}
)

const upgradeSummary = "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.42 due now; first full Scale charge on May 30, 2026."

func testAccount() Account {
	return Account{
		Org: Org{ID: "org_vb", Name: "Vector Build", StripeCustomerID: "cus_1"},
		Subscription: Subscription{Org: "org_vb", StripeSubscriptionID: "sub_1", StripeItemID: "si_1",
			Plan: "pro", Status: "active", CurrentPeriodEnd: periodEnd, Version: 1},
	}
}

func testCatalog(t *testing.T, plans []Plan) Catalog {
	t.Helper()
	c, err := NewCatalog(plans)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
}

type handshakeFixture struct {
	svc      *Service
	store    *memStore
	provider *memProvider
}

func newHandshakeFixture(t *testing.T) handshakeFixture {
	t.Helper()
	store := newMemStore(dbNow, testAccount())
	provider := &memProvider{preview: Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"}, periodEnd: periodEnd}
	svc, err := NewService(Config{Store: store, Payments: provider, Catalog: testCatalog(t, DefaultPlans()), TokenTTL: time.Minute,
		Livemode: true})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return handshakeFixture{svc: svc, store: store, provider: provider}
}

// propose makes a first call that must succeed with a token.
func (f handshakeFixture) propose(t *testing.T, caller Caller, op Operation, to string) ChangeResult {
	t.Helper()
	res, err := f.svc.ChangePlan(context.Background(), caller, ChangeRequest{Operation: op, To: to})
	if err != nil {
		t.Fatalf("first call %s %s: %v", op, to, err)
	}
	if !res.Proposed() {
		t.Fatalf("first call %s %s: no token in %+v", op, to, res)
	}
	return res
}

func (f handshakeFixture) confirm(caller Caller, op Operation, to, token string) (ChangeResult, error) {
	return f.svc.ChangePlan(context.Background(), caller, ChangeRequest{Operation: op, To: to, ConfirmToken: token})
}

func (f handshakeFixture) confirmation(t *testing.T, id string) Confirmation {
	t.Helper()
	c, ok := f.store.snapshot().confirmations[id]
	if !ok {
		t.Fatalf("confirmation %s not stored", id)
	}
	return c
}

func (f handshakeFixture) subscription() Subscription {
	return f.store.snapshot().accounts["org_vb"].Subscription
}

func wantCode(t *testing.T, err error, want Code) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("err = %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("err = nil, want %s", want)
	}
	if got := ErrorCode(err); got != want {
		t.Fatalf("ErrorCode = %s, want %s (err: %v)", got, want, err)
	}
}

// wantPublicMessageClean checks that the client's message echoes none of the
// given private strings.
func wantPublicMessageClean(t *testing.T, err error, private ...string) {
	t.Helper()
	msg := PublicMessage(err)
	if msg == "" {
		t.Error("PublicMessage is empty")
	}
	for _, p := range private {
		if strings.Contains(msg, p) {
			t.Errorf("PublicMessage %q contains private text %q", msg, p)
		}
	}
}

func eventsOf(st memState) []string {
	var names []string
	for _, e := range st.audit {
		names = append(names, e.Event)
	}
	return names
}

func lastEvent(t *testing.T, st memState) AuditEvent {
	t.Helper()
	if len(st.audit) == 0 {
		t.Fatal("no audit events")
	}
	return st.audit[len(st.audit)-1]
}

// ---- tests --------------------------------------------------------------------

func TestMemStoreInTxRollsBack(t *testing.T) {
	store := newMemStore(dbNow, testAccount())
	store.state.confirmations["cfm_x"] = Confirmation{ID: "cfm_x", Org: "org_vb", Status: StatusPending}
	boom := errors.New("boom")
	sub := testAccount().Subscription
	sub.Plan = "scale"
	err := store.InTx(context.Background(), func(tx Tx) error {
		if err := tx.Record(context.Background(), Record{ConfirmationID: "cfm_x", Status: StatusExecuted, Subscription: &sub,
			Events: []AuditEvent{{Event: EventOperationExecuted, Org: "org_vb"}}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want boom", err)
	}
	st := store.snapshot()
	if got := st.confirmations["cfm_x"].Status; got != StatusPending {
		t.Errorf("status after rollback = %s, want pending", got)
	}
	if got := st.accounts["org_vb"].Subscription; got.Plan != "pro" || got.Version != 1 {
		t.Errorf("subscription after rollback = %+v, want pro v1", got)
	}
	if len(st.audit) != 0 {
		t.Errorf("audit after rollback = %v, want none", eventsOf(st))
	}

	if err := store.InTx(context.Background(), func(tx Tx) error {
		return tx.Record(context.Background(), Record{ConfirmationID: "cfm_x", Status: StatusExecuted, Subscription: &sub})
	}); err != nil {
		t.Fatal(err)
	}
	st = store.snapshot()
	if st.confirmations["cfm_x"].Status != StatusExecuted || st.accounts["org_vb"].Subscription.Version != 2 {
		t.Errorf("commit not applied: %+v", st)
	}
}

func TestChangePlanProposeUpgrade(t *testing.T) {
	f := newHandshakeFixture(t)
	res := f.propose(t, alice, OpUpgrade, "scale")

	if res.ConfirmRequired == nil || !*res.ConfirmRequired || res.OK || res.Noop {
		t.Errorf("flags: confirm_required=%v ok=%v noop=%v, want true/false/false", res.ConfirmRequired, res.OK, res.Noop)
	}
	if !strings.HasPrefix(res.ConfirmToken, TokenPrefix) || !wellFormedToken(res.ConfirmToken) {
		t.Errorf("token %q is not well formed", res.ConfirmToken)
	}
	if !wellFormedConfirmationID(res.ConfirmationID) {
		t.Errorf("confirmation id %q is not well formed", res.ConfirmationID)
	}
	if res.Operation != OpUpgrade {
		t.Errorf("operation = %s", res.Operation)
	}
	if res.Summary != upgradeSummary {
		t.Errorf("summary =\n  %q\nwant\n  %q", res.Summary, upgradeSummary)
	}
	wantDetails := Details{From: "pro", To: "scale", AmountDueNowCents: 1742, Currency: "usd",
		EffectiveAt: dbNow.Truncate(time.Second), NextChargeAt: periodEnd, Livemode: true}
	if res.Details == nil || *res.Details != wantDetails {
		t.Errorf("details = %+v, want %+v", res.Details, wantDetails)
	}
	if res.TTLSeconds != 60 {
		t.Errorf("ttl_seconds = %d, want 60", res.TTLSeconds)
	}
	if res.ExpiresAt == nil || !res.ExpiresAt.Equal(dbNow.Add(time.Minute)) {
		t.Errorf("expires_at = %v, want %v", res.ExpiresAt, dbNow.Add(time.Minute))
	}
	if res.Subscription != nil {
		t.Errorf("a proposal carries no subscription: %+v", res.Subscription)
	}

	// The preview asked for exactly the change the confirmation will execute.
	wantChange := PlanChange{CustomerID: "cus_1", SubscriptionID: "sub_1", ItemID: "si_1", NewPriceID: "price_billingd_scale",
		ProrationDate: dbNow.Truncate(time.Second), ChargeNow: true}
	if len(f.provider.previews) != 1 || f.provider.previews[0] != wantChange {
		t.Errorf("previews = %+v, want [%+v]", f.provider.previews, wantChange)
	}
	if len(f.provider.applyCalls()) != 0 {
		t.Error("the first call executed a change")
	}

	c := f.confirmation(t, res.ConfirmationID)
	if c.Status != StatusPending || !bytes.Equal(c.TokenHash, hashToken(res.ConfirmToken)) {
		t.Errorf("stored confirmation: status %s, hash matches token: %v", c.Status, bytes.Equal(c.TokenHash, hashToken(res.ConfirmToken)))
	}
	if strings.Contains(fmt.Sprintf("%+v", c), res.ConfirmToken) {
		t.Error("the stored confirmation contains the token itself")
	}
	if c.Org != alice.Org || c.Principal != alice.Principal || c.Client != alice.Client || c.Operation != OpUpgrade {
		t.Errorf("confirmation not bound to caller and operation: %+v", c)
	}
	wantTerms := Terms{FromPlan: "pro", ToPlan: "scale", FromPriceID: "price_billingd_pro", ToPriceID: "price_billingd_scale",
		FromAmountCents: 1900, ToAmountCents: 4900, Currency: "usd", ProrationDate: dbNow.Truncate(time.Second),
		SubscriptionVer: 1, AmountDueCents: 1742, NextChargeAt: periodEnd, Livemode: true}
	if c.Terms != wantTerms {
		t.Errorf("terms = %+v, want %+v", c.Terms, wantTerms)
	}
	if got := eventsOf(f.store.snapshot()); !slices.Equal(got, []string{EventTokenIssued}) {
		t.Errorf("audit = %v, want [TOKEN_ISSUED]", got)
	}
}

func TestChangePlanProposeDowngradeCredit(t *testing.T) {
	f := newHandshakeFixture(t)
	f.provider.preview = Preview{ProrationCents: -1140, Currency: "usd"}
	res := f.propose(t, alice, OpDowngrade, "free")
	want := "Downgrade Vector Build from Pro ($19/mo) to Free ($0/mo). Nothing is charged now; a pro-rated credit of $11.40 goes to the next invoice; no charges from May 30, 2026."
	if res.Summary != want {
		t.Errorf("summary =\n  %q\nwant\n  %q", res.Summary, want)
	}
	if res.Details.AmountDueNowCents != 0 || res.Details.CreditCents != 1140 {
		t.Errorf("details = %+v, want due 0 credit 1140", *res.Details)
	}
	if f.provider.previews[0].ChargeNow {
		t.Error("a downgrade preview must not charge now")
	}
}

func TestChangePlanNoop(t *testing.T) {
	for _, op := range []Operation{OpUpgrade, OpDowngrade} {
		t.Run(string(op), func(t *testing.T) {
			f := newHandshakeFixture(t)
			res, err := f.svc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: op, To: "pro"})
			wantCode(t, err, "")
			if !res.OK || !res.Noop || res.ConfirmRequired == nil || *res.ConfirmRequired || res.ConfirmToken != "" {
				t.Errorf("result = %+v, want ok noop confirm_required=false without token", res)
			}
			if res.Subscription == nil || res.Subscription.Plan != "pro" {
				t.Errorf("subscription = %+v, want plan pro", res.Subscription)
			}
			st := f.store.snapshot()
			if len(st.confirmations) != 0 || len(f.provider.previews) != 0 {
				t.Errorf("a no-op issued a confirmation (%d) or asked for a preview (%d)", len(st.confirmations), len(f.provider.previews))
			}
		})
	}
}

func TestChangePlanConfirmExecutesOnce(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")

	res, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription == nil || res.Subscription.Plan != "scale" || res.Subscription.Status != "active" ||
		!res.Subscription.CurrentPeriodEnd.Equal(periodEnd) {
		t.Fatalf("result = %+v / %+v, want ok on scale", res, res.Subscription)
	}
	if res.ConfirmToken != "" || res.Noop {
		t.Errorf("an executed change carries no token and is no no-op: %+v", res)
	}
	calls := f.provider.applyCalls()
	if len(calls) != 1 {
		t.Fatalf("provider calls = %d, want 1", len(calls))
	}
	if calls[0].key != "billingd-"+p.ConfirmationID {
		t.Errorf("idempotency key = %q, want derived from %s", calls[0].key, p.ConfirmationID)
	}
	// The executed change is the previewed one, naming its confirmation.
	previewed := f.provider.previews[0]
	previewed.ConfirmationID = p.ConfirmationID
	if calls[0].change != previewed {
		t.Errorf("executed change %+v differs from the previewed %+v", calls[0].change, previewed)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusExecuted {
		t.Errorf("status = %s, want executed", c.Status)
	}
	if sub := f.subscription(); sub.Plan != "scale" || sub.Version != 2 || sub.StripeItemID != "si_new" {
		t.Errorf("stored subscription = %+v, want scale v2 si_new", sub)
	}
	st := f.store.snapshot()
	if got, want := eventsOf(st), []string{EventTokenIssued, EventTokenValidated, EventOperationExecuted}; !slices.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}

	// The owner repeats the call: the original answer, replayed.
	replay, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !replay.Replayed || !replay.OK || replay.Subscription.Plan != "scale" {
		t.Errorf("replay = %+v, want the original result with replayed", replay)
	}
	if n := len(f.provider.applyCalls()); n != 1 {
		t.Errorf("provider calls after a replay = %d, want 1", n)
	}
	// Other parameters with the spent token: used.
	_, err = f.confirm(alice, OpUpgrade, "pro", p.ConfirmToken)
	wantCode(t, err, CodeTokenInvalid)
	if e := lastEvent(t, f.store.snapshot()); e.Event != EventTokenRejected || e.Reason != "used" || e.ConfirmationID != p.ConfirmationID {
		t.Errorf("reuse audited as %+v, want TOKEN_REJECTED used", e)
	}
}

func TestChangePlanConfirmProviderRefuses(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode Code
	}{
		{"declined", fmt.Errorf("stripe: card_declined: secret-detail-42 (req_abc): %w", ErrPaymentDeclined), CodePaymentFailed},
		{"rejected", fmt.Errorf("stripe: resource_missing: secret-detail-42 (req_abc): %w", ErrProviderRejected), CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, OpUpgrade, "scale")
			f.provider.applyErrs = []error{tt.err}

			_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, tt.wantCode)
			wantPublicMessageClean(t, err, "secret-detail-42", "card_declined", "resource_missing", "req_abc", "stripe")
			if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusFailed {
				t.Errorf("status = %s, want failed", c.Status)
			}
			if sub := f.subscription(); sub.Plan != "pro" || sub.Version != 1 {
				t.Errorf("subscription = %+v, want unchanged", sub)
			}
			st := f.store.snapshot()
			if got, want := eventsOf(st), []string{EventTokenIssued, EventTokenValidated, EventOperationFailed}; !slices.Equal(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			if e := lastEvent(t, st); e.Reason != string(tt.wantCode) || e.Outcome != "failed" {
				t.Errorf("failure audited as %+v", e)
			}

			// A definite refusal ends the confirmation.
			_, err = f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, CodeTokenInvalid)
			if n := len(f.provider.applyCalls()); n != 1 {
				t.Errorf("provider calls = %d, want 1", n)
			}
		})
	}
}

func TestChangePlanConfirmUnknownOutcomeIsRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"unavailable", fmt.Errorf("stripe: 503 secret-detail-42: %w", ErrUnavailable)},
		{"deadline", fmt.Errorf("stripe: secret-detail-42: %w", context.DeadlineExceeded)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, OpUpgrade, "scale")
			f.provider.applyErrs = []error{tt.err}
			before := f.store.snapshot()

			_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, CodeUpstreamUnavailable)
			wantPublicMessageClean(t, err, "secret-detail-42", "503", "stripe")

			// The unknown outcome is recorded: executing, to be settled.
			after := f.store.snapshot()
			if c := after.confirmations[p.ConfirmationID]; c.Status != StatusExecuting {
				t.Errorf("status = %s, want executing", c.Status)
			}
			if sub := after.accounts["org_vb"].Subscription; sub != before.accounts["org_vb"].Subscription {
				t.Errorf("subscription changed: %+v", sub)
			}
			if got, want := eventsOf(after), []string{EventTokenIssued, EventTokenValidated, EventOperationFailed}; !slices.Equal(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			if e := lastEvent(t, after); e.Outcome != "unknown" || e.ConfirmationID != p.ConfirmationID {
				t.Errorf("unknown outcome audited as %+v", e)
			}

			// The token is still good, and the retry is the same provider request.
			res, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, "")
			if !res.OK || res.Subscription.Plan != "scale" {
				t.Errorf("retry result = %+v", res)
			}
			calls := f.provider.applyCalls()
			if len(calls) != 2 || calls[0].key != calls[1].key || calls[0].change != calls[1].change {
				t.Errorf("calls = %+v, want two identical requests with the same idempotency key", calls)
			}
		})
	}
}

// A crash between the provider's answer and the commit: the provider applied
// the change but the database rolled back. The retry must not change the
// subscription twice.
func TestChangePlanConfirmCommitFailsAfterProviderApplied(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	failures := 1
	f.store.recordErr = func(r Record) error {
		if r.Subscription != nil && failures > 0 {
			failures--
			return fmt.Errorf("connection reset secret-detail-42: %w", ErrUnavailable)
		}
		return nil
	}

	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)
	wantPublicMessageClean(t, err, "secret-detail-42", "connection reset")
	if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusPending {
		t.Errorf("status = %s, want pending after the rollback", c.Status)
	}
	if sub := f.subscription(); sub.Plan != "pro" || sub.Version != 1 {
		t.Errorf("subscription = %+v, want the rolled-back pro v1", sub)
	}

	res, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription.Plan != "scale" {
		t.Errorf("retry result = %+v", res)
	}
	calls := f.provider.applyCalls()
	if len(calls) != 2 || calls[0].key != calls[1].key {
		t.Errorf("calls = %+v, want two with the same key", calls)
	}
	if f.provider.changes != 1 {
		t.Errorf("provider changed the subscription %d times, want 1", f.provider.changes)
	}
}

func TestChangePlanInvalidRequest(t *testing.T) {
	tests := []struct {
		name string
		req  ChangeRequest
	}{
		{"unknown operation", ChangeRequest{Operation: "delete_plan", To: "scale"}},
		{"empty operation", ChangeRequest{Operation: "", To: "scale"}},
		{"operation case", ChangeRequest{Operation: "UPGRADE_PLAN", To: "scale"}},
		{"unknown operation with token", ChangeRequest{Operation: "cancel_plan", To: "scale", ConfirmToken: "pbc_" + strings.Repeat("a", 43)}},
		{"path traversal", ChangeRequest{Operation: OpUpgrade, To: "../x"}},
		{"empty plan", ChangeRequest{Operation: OpUpgrade, To: ""}},
		{"65 chars", ChangeRequest{Operation: OpUpgrade, To: strings.Repeat("a", 65)}},
		{"upper case", ChangeRequest{Operation: OpUpgrade, To: "PRO"}},
		{"space", ChangeRequest{Operation: OpUpgrade, To: "pro "}},
		{"leading dash", ChangeRequest{Operation: OpUpgrade, To: "-pro"}},
		{"slash", ChangeRequest{Operation: OpDowngrade, To: "a/b"}},
		{"newline", ChangeRequest{Operation: OpDowngrade, To: "pro\n"}},
		{"bad plan with token", ChangeRequest{Operation: OpUpgrade, To: "../x", ConfirmToken: "pbc_" + strings.Repeat("a", 43)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			_, err := f.svc.ChangePlan(context.Background(), alice, tt.req)
			wantCode(t, err, CodeInvalidRequest)
			for _, param := range []string{string(tt.req.Operation), tt.req.To} {
				if param != "" && strings.Contains(PublicMessage(err), param) {
					t.Errorf("message %q echoes the parameter %q", PublicMessage(err), param)
				}
			}
			st := f.store.snapshot()
			if len(st.confirmations) != 0 || len(st.audit) != 0 || len(f.provider.previews) != 0 || len(f.provider.applyCalls()) != 0 {
				t.Error("an invalid request reached the store or the provider")
			}
		})
	}
}

func TestChangePlanPlanErrors(t *testing.T) {
	tests := []struct {
		name string
		op   Operation
		to   string
		want Code
	}{
		{"unknown plan", OpUpgrade, "enterprise", CodeUnknownPlan},
		{"upgrade to cheaper", OpUpgrade, "free", CodeInvalidPlanChange},
		{"downgrade to dearer", OpDowngrade, "scale", CodeInvalidPlanChange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			_, err := f.svc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: tt.op, To: tt.to})
			wantCode(t, err, tt.want)
			if len(f.store.snapshot().confirmations) != 0 {
				t.Error("a confirmation was issued")
			}
		})
	}
}

func TestChangePlanProposeFailures(t *testing.T) {
	t.Run("unknown org", func(t *testing.T) {
		f := newHandshakeFixture(t)
		_, err := f.svc.ChangePlan(context.Background(), Caller{Org: "org_nope", Principal: "x"}, ChangeRequest{Operation: OpUpgrade, To: "scale"})
		wantCode(t, err, CodeNotFound)
	})
	t.Run("preview unavailable", func(t *testing.T) {
		f := newHandshakeFixture(t)
		f.provider.previewErr = fmt.Errorf("dial tcp 10.0.0.1: secret-detail-42: %w", ErrUnavailable)
		_, err := f.svc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: OpUpgrade, To: "scale"})
		wantCode(t, err, CodeUpstreamUnavailable)
		wantPublicMessageClean(t, err, "secret-detail-42", "10.0.0.1")
		if len(f.store.snapshot().confirmations) != 0 {
			t.Error("a confirmation was issued without a preview")
		}
	})
	t.Run("preview currency differs", func(t *testing.T) {
		f := newHandshakeFixture(t)
		f.provider.preview.Currency = "eur"
		_, err := f.svc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: OpUpgrade, To: "scale"})
		wantCode(t, err, CodeInternal)
		wantPublicMessageClean(t, err, "eur")
	})
}

func TestChangePlanMalformedToken(t *testing.T) {
	tests := []struct {
		name, token string
	}{
		{"no prefix", "hello"},
		{"prefix only", "pbc_"},
		{"too short", "pbc_abc"},
		{"wrong prefix", "pbx_" + strings.Repeat("a", 43)},
		{"not url safe", "pbc_" + strings.Repeat("a", 40) + "+/="},
		{"too long", "pbc_" + strings.Repeat("a", 77)},
		{"sql", "pbc_' OR 1=1 --aaaaaaaaaaaaaaaa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			f.propose(t, alice, OpUpgrade, "scale")
			_, err := f.confirm(alice, OpUpgrade, "scale", tt.token)
			wantCode(t, err, CodeTokenInvalid)
			wantPublicMessageClean(t, err, tt.token)
			if len(f.provider.applyCalls()) != 0 {
				t.Error("provider called")
			}
			if e := lastEvent(t, f.store.snapshot()); e.Event != EventTokenRejected || e.Reason != "invalid" || e.ConfirmationID != "" {
				t.Errorf("audited as %+v, want TOKEN_REJECTED invalid without a confirmation", e)
			}
		})
	}
}

func TestChangePlanTokenOfSomeoneElse(t *testing.T) {
	tests := []struct {
		name   string
		caller Caller
	}{
		{"unknown token", alice},
		{"other principal", Caller{Org: alice.Org, Principal: "mallory"}},
		{"other org", Caller{Org: "org_other", Principal: alice.Principal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, OpUpgrade, "scale")
			token := p.ConfirmToken
			if tt.name == "unknown token" {
				token, _ = newToken()
			}
			_, err := f.confirm(tt.caller, OpUpgrade, "scale", token)
			wantCode(t, err, CodeTokenInvalid)
			if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusPending {
				t.Errorf("status = %s, want pending: nothing happens to the owner's token", c.Status)
			}
			if len(f.provider.applyCalls()) != 0 {
				t.Error("provider called")
			}
			// Still valid for its owner.
			_, err = f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, "")
		})
	}
}

func TestChangePlanConfirmRejections(t *testing.T) {
	tests := []struct {
		name       string
		arrange    func(f handshakeFixture)
		op         Operation
		to         string
		wantCode   Code
		wantReason string
		wantStatus Status
	}{
		{name: "expired", arrange: func(f handshakeFixture) { f.store.advance(time.Minute + time.Nanosecond) },
			op: OpUpgrade, to: "scale", wantCode: CodeTokenExpired, wantReason: "expired", wantStatus: StatusExpired},
		{name: "operation differs", op: OpDowngrade, to: "scale",
			wantCode: CodeTokenMismatch, wantReason: "mismatch", wantStatus: StatusInvalidated},
		{name: "plan differs", op: OpUpgrade, to: "free",
			wantCode: CodeTokenMismatch, wantReason: "mismatch", wantStatus: StatusInvalidated},
		{name: "subscription changed", arrange: func(f handshakeFixture) {
			f.store.mu.Lock()
			a := f.store.state.accounts["org_vb"]
			a.Subscription.Version++
			f.store.state.accounts["org_vb"] = a
			f.store.mu.Unlock()
		}, op: OpUpgrade, to: "scale", wantCode: CodeTokenMismatch, wantReason: "mismatch", wantStatus: StatusInvalidated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, OpUpgrade, "scale")
			if tt.arrange != nil {
				tt.arrange(f)
			}
			_, err := f.confirm(alice, tt.op, tt.to, p.ConfirmToken)
			wantCode(t, err, tt.wantCode)
			if c := f.confirmation(t, p.ConfirmationID); c.Status != tt.wantStatus {
				t.Errorf("status = %s, want %s", c.Status, tt.wantStatus)
			}
			if e := lastEvent(t, f.store.snapshot()); e.Event != EventTokenRejected || e.Reason != tt.wantReason {
				t.Errorf("audited as %+v, want TOKEN_REJECTED %s", e, tt.wantReason)
			}
			if len(f.provider.applyCalls()) != 0 {
				t.Error("provider called")
			}
			// The rejection voided the token: the original request fails too.
			_, err = f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
			if code := ErrorCode(err); code != CodeTokenInvalid && code != CodeTokenExpired {
				t.Errorf("original request after rejection: %v, want consent_token_invalid or _expired", err)
			}
		})
	}
}

func TestChangePlanSupersedes(t *testing.T) {
	f := newHandshakeFixture(t)
	first := f.propose(t, alice, OpUpgrade, "scale")
	second := f.propose(t, alice, OpUpgrade, "scale")
	if first.ConfirmToken == second.ConfirmToken || first.ConfirmationID == second.ConfirmationID {
		t.Fatal("second proposal reused the first's token or id")
	}
	_, err := f.confirm(alice, OpUpgrade, "scale", first.ConfirmToken)
	wantCode(t, err, CodeTokenInvalid)
	_, err = f.confirm(alice, OpUpgrade, "scale", second.ConfirmToken)
	wantCode(t, err, "")
}

func TestChangePlanConcurrentConfirm(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	const n = 16
	errs := make([]error, n)
	results := make([]ChangeResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken) })
	}
	wg.Wait()
	executed, replayed := 0, 0
	for i, err := range errs {
		switch {
		case err != nil:
			t.Errorf("call %d got %v, want the result or its replay", i, err)
		case results[i].Replayed:
			replayed++
		default:
			executed++
		}
	}
	if executed != 1 || replayed != n-1 || len(f.provider.applyCalls()) != 1 {
		t.Errorf("%d executed, %d replayed, %d reached the provider; want 1, %d, 1", executed, replayed, len(f.provider.applyCalls()), n-1)
	}
}

// TestChangePlanUpperCaseCatalogCurrency: a catalog written with "USD" works
// with a provider that reports "usd", as Stripe does.
func TestChangePlanUpperCaseCatalogCurrency(t *testing.T) {
	f := newHandshakeFixture(t)
	plans := DefaultPlans()
	for i := range plans {
		plans[i].Currency = "USD"
	}
	svc, err := NewService(Config{Store: f.store, Payments: f.provider, Catalog: testCatalog(t, plans), TokenTTL: time.Minute,
		Livemode: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: OpUpgrade, To: "scale"})
	wantCode(t, err, "")
}

// TestTestModeIsStatedAndBound: with a test-mode key the summary says so and
// details carry livemode false; a token issued in one mode does not execute
// in the other.
func TestTestModeIsStatedAndBound(t *testing.T) {
	f := newHandshakeFixture(t)
	testSvc, err := NewService(Config{Store: f.store, Payments: f.provider, Catalog: testCatalog(t, DefaultPlans()),
		TokenTTL: time.Minute, Livemode: false})
	if err != nil {
		t.Fatal(err)
	}
	res, err := testSvc.ChangePlan(context.Background(), alice, ChangeRequest{Operation: OpUpgrade, To: "scale"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res.Summary, " Test mode: no real money moves.") || res.Details.Livemode {
		t.Fatalf("test-mode proposal: %q, livemode %t", res.Summary, res.Details.Livemode)
	}
	live := f.propose(t, alice, OpUpgrade, "scale")
	if strings.Contains(live.Summary, "Test mode") || !live.Details.Livemode {
		t.Fatalf("live proposal: %q, livemode %t", live.Summary, live.Details.Livemode)
	}
	// The live service issued the live token; the test-mode service must
	// refuse it, and nothing reaches the provider.
	_, err = testSvc.ChangePlan(context.Background(), alice,
		ChangeRequest{Operation: OpUpgrade, To: "scale", ConfirmToken: live.ConfirmToken})
	wantCode(t, err, CodeTokenMismatch)
	if n := len(f.provider.applyCalls()); n != 0 {
		t.Fatalf("%d changes reached the provider", n)
	}
}

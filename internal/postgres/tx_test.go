package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
)

// exchanges is a pgx tracer that notes each exchange with the server: a
// query or a batch (one pipeline), by its statements' first words.
type exchanges struct {
	mu   sync.Mutex
	seen [][]string
}

func (x *exchanges) note(sqls ...string) {
	words := make([]string, len(sqls))
	for i, s := range sqls {
		f := strings.Fields(s)
		words[i] = strings.ToUpper(strings.Join(f[:min(len(f), 2)], " "))
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seen = append(x.seen, words)
}

func (x *exchanges) take() [][]string {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.seen
	x.seen = nil
	return s
}

func (x *exchanges) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	x.note(d.SQL)
	return ctx
}
func (x *exchanges) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (x *exchanges) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	x.note(sqls...)
	return ctx
}
func (x *exchanges) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (x *exchanges) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedStore is a store whose pool, of one connection, notes its exchanges.
func tracedStore(t *testing.T) (*postgres.Store, *exchanges) {
	store, x, _ := tracedPool(t)
	return store, x
}

func tracedPool(t *testing.T) (*postgres.Store, *exchanges, *pgxpool.Pool) {
	t.Helper()
	db := testenv.NewDatabase(t)
	x := &exchanges{}
	pool, err := postgres.Open(context.Background(), db.URL+"&pool_max_conns=1", postgres.PoolConfig{Tracer: x})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return postgres.NewStore(pool), x, pool
}

// seedPending stores org acme and alice's pending confirmation cfm_1, bound
// to token tok-1.
func seedPending(t *testing.T, store *postgres.Store) billing.Confirmation {
	t.Helper()
	ctx := context.Background()
	if err := store.CreateAccount(ctx, billingtest.Account("acme")); err != nil {
		t.Fatal(err)
	}
	c := billingtest.Pending("acme", "alice", "cfm_1", "tok-1")
	if _, err := store.IssueConfirmation(ctx, c, time.Minute, billing.AuditEvent{Event: billing.EventTokenIssued, Org: "acme", Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHandshakeRoundTrips: a first call's reads are one round trip, and a
// second call's transaction two: BEGIN travels with the lock, COMMIT with
// the writes (issue 15). Exchanges of statements already prepared on the
// connection: a statement's first use on a connection adds a prepare.
func TestHandshakeRoundTrips(t *testing.T) {
	store, x := tracedStore(t)
	ctx := context.Background()
	c := seedPending(t, store)
	x.take()

	if _, _, err := store.AccountForCall(ctx, "acme", "alice", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := x.take(); len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("account and activity: exchanges %v, want one batch of two statements", got)
	}

	sub := billingtest.Account("acme").Subscription
	sub.Plan = "scale"
	var activity billing.Activity
	err := store.InTx(ctx, func(tx billing.Tx) error {
		// The rate limit's count rides in the lock's exchange.
		tx.ReadActivity("acme", "alice", time.Hour, &activity)
		if _, _, _, err := tx.LockByToken(ctx, "acme", "alice", billingtest.TokenHash("tok-1")); err != nil {
			return err
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: c.ID, Status: billing.StatusExecuted, Subscription: &sub,
			Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: "acme", Principal: "alice"}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	got := x.take()
	if len(got) != 2 || got[0][0] != "BEGIN" || got[0][1] != "SELECT COUNT(*)" || got[1][len(got[1])-1] != "COMMIT" {
		t.Fatalf("second call's transaction: exchanges %v, want [BEGIN, the activity's count, the locks …] [… COMMIT]", got)
	}
	if activity.Issued != 1 || activity.Now.IsZero() {
		t.Fatalf("activity read with the lock: %+v, want the one token issued", activity)
	}
	if a, _, err := store.Account(ctx, "acme"); err != nil || a.Subscription.Plan != "scale" {
		t.Fatalf("after commit: plan %q, %v", a.Subscription.Plan, err)
	}

	// A step that reads nothing and writes nothing sends nothing.
	x.take()
	if err := store.InTx(ctx, func(billing.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := x.take(); len(got) != 0 {
		t.Fatalf("empty transaction: exchanges %v, want none", got)
	}
}

// TestFailedWriteRollsBackAtCommit: a write held back until the commit
// that fails there fails the commit, undoes the step's other writes and
// leaves the connection fit for the next transaction.
func TestFailedWriteRollsBackAtCommit(t *testing.T) {
	store, _ := tracedStore(t) // one connection: the next transaction reuses it
	ctx := context.Background()
	c := seedPending(t, store)
	receipt := &billing.StoredReceipt{ConfirmationID: c.ID, Org: "acme", Principal: "alice", Summary: "s", Receipt: "r"}
	if err := store.InTx(ctx, func(tx billing.Tx) error {
		return tx.Record(ctx, billing.Record{Receipt: receipt})
	}); err != nil {
		t.Fatal(err)
	}
	sub := billingtest.Account("acme").Subscription
	sub.Plan = "scale"
	err := store.InTx(ctx, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockByToken(ctx, "acme", "alice", billingtest.TokenHash("tok-1")); err != nil {
			return err
		}
		// The receipt exists already: this batch fails at the commit.
		return tx.Record(ctx, billing.Record{ConfirmationID: c.ID, Status: billing.StatusExecuted, Subscription: &sub,
			Receipt: receipt, Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: "acme", Principal: "alice"}}})
	})
	if err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("InTx = %v, want the commit to fail", err)
	}
	a, _, err := store.Account(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	pending, _ := store.PendingConfirmations(ctx, "acme", "")
	events, _ := store.AuditEvents(ctx, "acme", 10, 0)
	if a.Subscription.Plan != "pro" || len(pending) != 1 || len(events) != 1 {
		t.Fatalf("after the failed commit: plan %q, %d pending, %d events; want pro, 1, 1", a.Subscription.Plan, len(pending), len(events))
	}
}

// TestRollbackLeavesConnectionClean: a step that fails after its first
// read is rolled back, and the connection's next transaction starts fresh.
func TestRollbackLeavesConnectionClean(t *testing.T) {
	store, _ := tracedStore(t)
	ctx := context.Background()
	if err := store.CreateAccount(ctx, billingtest.Account("acme")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	sub := billingtest.Account("acme").Subscription
	sub.Plan = "scale"
	err := store.InTx(ctx, func(tx billing.Tx) error {
		if _, err := tx.LockSubscription(ctx, "sub_acme"); err != nil {
			return err
		}
		if err := tx.Record(ctx, billing.Record{Subscription: &sub}); err != nil {
			return err
		}
		if _, err := tx.ExecutedSince(ctx, "acme", time.Hour); err != nil { // sends the write
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want boom", err)
	}
	// The same (only) connection: were it still inside the rolled-back
	// transaction, this would see plan scale or fail.
	err = store.InTx(ctx, func(tx billing.Tx) error {
		a, err := tx.LockSubscription(ctx, "sub_acme")
		if err == nil && a.Subscription.Plan != "pro" {
			err = errors.New("plan " + a.Subscription.Plan + " after rollback")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStepWritesReachDatabaseBeforeProvider: the writes a step holds back
// are sent before the provider is called (billing's beforeProvider). A
// step-up verification whose write fails (a CHECK constraint added here
// stands in for any failure) stops the second call with nothing charged,
// and a good retry records both the verification and the change.
func TestStepWritesReachDatabaseBeforeProvider(t *testing.T) {
	db := testenv.NewDatabase(t)
	ctx := context.Background()
	store := postgres.NewStore(db.Pool)
	if err := store.CreateAccount(ctx, billingtest.Account("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE confirmations ADD CONSTRAINT test_acr CHECK (verified_acr IS DISTINCT FROM 'refused')`); err != nil {
		t.Fatal(err)
	}
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"},
		PeriodEnd: time.Now().Add(30 * 24 * time.Hour), ReadState: billingtest.StateOf(billingtest.Account("acme"))}
	catalog, err := billing.NewCatalog(billing.DefaultPlans())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: catalog, TokenTTL: time.Minute,
		PublicBaseURL: "https://billing.example"})
	if err != nil {
		t.Fatal(err)
	}
	admin := billing.Caller{Org: "acme", Principal: "root", Admin: true, Session: true} // a person: only a person sets the policy
	if _, err := svc.SetPolicy(ctx, admin, billing.Policy{AgentClients: []string{"bot"},
		Rules: []billing.PolicyRule{{Name: "verify", Action: billing.ActionVerify}}}); err != nil {
		t.Fatal(err)
	}
	agent := billing.Caller{Org: "acme", Principal: "vera", Client: "bot"}
	p, err := svc.ChangePlan(ctx, agent, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
	if err != nil {
		t.Fatal(err)
	}
	stepUp := agent
	stepUp.AuthTime, stepUp.ACR = time.Now().Add(time.Minute), "refused"
	second := billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale", ConfirmToken: p.ConfirmToken}
	if _, err := svc.ChangePlan(ctx, stepUp, second); err == nil {
		t.Fatal("the second call succeeded although its verification could not be written")
	}
	if n := len(provider.ApplyCalls()); n != 0 {
		t.Fatalf("the provider was called %d times before the verification was written", n)
	}
	stepUp.ACR = "pwd"
	if _, err := svc.ChangePlan(ctx, stepUp, second); err != nil {
		t.Fatalf("retry: %v", err)
	}
	var status string
	var verifiedAt *time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT status, verified_at FROM confirmations WHERE id = $1`, p.ConfirmationID).Scan(&status, &verifiedAt); err != nil {
		t.Fatal(err)
	}
	events, _ := store.AuditEvents(ctx, "acme", 20, 0)
	verified := 0
	for _, e := range events {
		if e.Event == billing.EventUserVerified {
			verified++
		}
	}
	if status != string(billing.StatusExecuted) || verifiedAt == nil || verified != 1 || len(provider.ApplyCalls()) != 1 {
		t.Fatalf("after the retry: %s, verified_at %v, %d USER_VERIFIED, %d provider calls", status, verifiedAt, verified, len(provider.ApplyCalls()))
	}
}

// TestNotFoundKeepsStatementsPrepared: a lock that finds nothing (the
// reconciler's tick, most of the time) is no error of its batch, so pgx
// keeps the batch's statements prepared, BEGIN included, and the next
// transaction needs no new prepare.
func TestNotFoundKeepsStatementsPrepared(t *testing.T) {
	store, _, pool := tracedPool(t) // one connection
	ctx := context.Background()
	tick := func() {
		err := store.InTx(ctx, func(tx billing.Tx) error {
			_, _, _, err := tx.LockUnsettled(ctx, 0, nil)
			return err
		})
		if !errors.Is(err, billing.ErrNotFound) {
			t.Fatalf("reconciler tick on nothing: %v, want ErrNotFound", err)
		}
	}
	tick()
	tick()
	var prepared int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
		WHERE (statement = 'BEGIN' OR statement LIKE '%SKIP LOCKED%') AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 2 {
		t.Fatalf("%d of BEGIN and the lock still prepared after a lock found nothing, want 2", prepared)
	}
}

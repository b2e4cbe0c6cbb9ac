package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
)

// mandateLocker is the Tx's mandate lock, as billing uses it.
type mandateLocker interface {
	LockMandate(ctx context.Context, org, id string) (billing.Mandate, time.Time, error)
}

// TestLockMandateSeesTheSpendItWaitedFor: a transaction that waited for a
// mandate's lock reads what the mandate spent as of when it got the lock,
// the recovery point of the change it waited for included (READ
// COMMITTED gives a statement that waited for a row lock its old snapshot
// for everything else). Without that, two changes could both count on the
// same remaining budget.
func TestLockMandateSeesTheSpendItWaitedFor(t *testing.T) {
	db := testenv.NewDatabase(t)
	ctx := context.Background()
	pool, err := postgres.Open(ctx, db.URL+"&pool_max_conns=4", postgres.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := postgres.NewStore(pool)
	c := seedPending(t, store)
	m := billing.Mandate{ID: "mdt_aaaaaaaaaaaaaaaaaaaaaa", Org: "acme", Principal: "alice", Client: "agent",
		Operations: []billing.Operation{billing.OpUpgrade}, ToPlans: []string{"scale"}, MaxAmountDueCents: 1 << 20,
		BudgetCents: 1 << 20, MaxChanges: 5, Currency: "usd", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), JWS: "x"}
	if err := store.InsertMandate(ctx, m, billing.AuditEvent{Event: billing.EventMandateGranted, Org: "acme", Principal: "alice"}); err != nil {
		t.Fatal(err)
	}

	locked, waiting, waited := make(chan struct{}), make(chan struct{}), make(chan billing.Mandate, 1)
	var once sync.Once
	spend := func() { once.Do(func() { close(waiting) }) }
	t.Cleanup(spend) // before the pool's Close, which waits for the transaction
	errs := make(chan error, 2)
	go func() {
		errs <- store.InTx(ctx, func(tx billing.Tx) error {
			if _, _, err := tx.(mandateLocker).LockMandate(ctx, "acme", m.ID); err != nil {
				return err
			}
			close(locked)
			<-waiting // the other transaction is waiting for the lock
			consent := &billing.Consent{Method: billing.ConsentMandate, HumanPresent: billing.HumanNone, MandateID: m.ID}
			_, _, _, err := tx.SaveRecoveryPoint(ctx, c.ID, 0, consent) // commits: the spend
			return err
		})
	}()
	<-locked
	go func() {
		errs <- store.InTx(ctx, func(tx billing.Tx) error {
			got, _, err := tx.(mandateLocker).LockMandate(ctx, "acme", m.ID)
			waited <- got
			return err
		})
	}()
	// Spend only once the other transaction waits for the lock (it may take
	// a while to get there on a loaded machine); otherwise it would not
	// wait at all, and the test would prove nothing.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second transaction never waited for the mandate's lock")
		}
	}
	spend()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := <-waited
	if got.Changes != 1 || got.SpentCents != c.Terms.AmountDueCents || got.Status != billing.MandateActive {
		t.Fatalf("after waiting: %d changes, %d spent (%s); want 1, %d", got.Changes, got.SpentCents, got.Status, c.Terms.AmountDueCents)
	}
	list, err := store.Mandates(ctx, "acme", "alice", "agent")
	if err != nil || len(list) != 1 || list[0].Changes != 1 {
		t.Fatalf("listed %+v, %v", list, err)
	}

	// Revoked by someone not allowed: nothing; by alice: revoked, once.
	no := func(billing.Mandate) bool { return false }
	if _, err := store.RevokeMandate(ctx, "acme", m.ID, "bob", no, billing.AuditEvent{}); err != billing.ErrNotFound {
		t.Fatalf("revoke refused: %v", err)
	}
	yes := func(billing.Mandate) bool { return true }
	ev := billing.AuditEvent{Event: billing.EventMandateRevoked, Org: "acme", Principal: "alice"}
	r, err := store.RevokeMandate(ctx, "acme", m.ID, "alice", yes, ev)
	if err != nil || r.Status != billing.MandateRevoked || r.RevokedAt == nil || r.RevokedBy != "alice" {
		t.Fatalf("revoked %+v, %v", r, err)
	}
}

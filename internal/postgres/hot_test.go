package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// TestHandshakeUpdatesAreHOT: the rows every executed change updates, its
// subscription and its org's audit chain head, are updated in place (HOT:
// no new index entries) even when their pages were filled by inserts
// (migration 000020's fillfactor). At the default fillfactor the first
// update of a row on a full page is not HOT.
func TestHandshakeUpdatesAreHOT(t *testing.T) {
	store, _, pool := tracedPool(t)
	ctx := context.Background()
	// Enough orgs to fill the first pages of both tables, each with a
	// chain head (the first audit event of an org makes it).
	const orgs = 300
	for i := range orgs {
		org := fmt.Sprintf("org-%03d", i)
		if err := store.CreateAccount(ctx, billingtest.Account(org)); err != nil {
			t.Fatal(err)
		}
		if err := store.AppendAudit(ctx, billing.AuditEvent{Event: billing.EventPolicyUpdated, Org: org, Principal: "alice", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	before := tupleUpdates(t, pool, 0)
	// An executed change of the first few orgs (rows on the first page),
	// as a second call records it.
	const changes = 10
	for i := range changes {
		org := fmt.Sprintf("org-%03d", i)
		sub := billingtest.Account(org).Subscription
		sub.Plan = "scale"
		err := store.InTx(ctx, func(tx billing.Tx) error {
			return tx.Record(ctx, billing.Record{Subscription: &sub,
				Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: org, Principal: "alice", Outcome: "ok"}}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	after := tupleUpdates(t, pool, before["subscriptions"].updated+changes)
	for _, table := range []string{"subscriptions", "audit_chain_heads"} {
		upd := after[table].updated - before[table].updated
		hot := after[table].hot - before[table].hot
		if upd < changes || hot != upd {
			t.Errorf("%s: %d of %d updates HOT, want all (fillfactor leaves room on the page)", table, hot, upd)
		}
	}
}

type updates struct{ updated, hot int64 }

// tupleUpdates reads the tables' update counts once the statistics show at
// least wantSubscriptions updates of subscriptions: a backend's counts
// reach the statistics views when it goes idle (the pool has the one
// connection, asked to flush at once).
func tupleUpdates(t *testing.T, pool *pgxpool.Pool, wantSubscriptions int64) map[string]updates {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relname IN ('subscriptions', 'audit_chain_heads')`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]updates{}
		for rows.Next() {
			var name string
			var u updates
			if err := rows.Scan(&name, &u.updated, &u.hot); err != nil {
				t.Fatal(err)
			}
			got[name] = u
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if got["subscriptions"].updated >= wantSubscriptions || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/evidence"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/testenv"
)

// export reads org's chain.
func export(t *testing.T, store *postgres.Store, org string) []billing.ChainedEvent {
	t.Helper()
	var events []billing.ChainedEvent
	err := store.ExportAudit(context.Background(), org, func(e billing.ChainedEvent) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestChainHashGoMatchesSQL: the offline verifier's encoding (Go) and the
// database's (the trigger's SQL) give the same hash, for awkward values too.
func TestChainHashGoMatchesSQL(t *testing.T) {
	db := testenv.NewDatabase(t)
	store := postgres.NewStore(db.Pool)
	ctx := context.Background()
	authTime := time.Date(2026, 11, 24, 23, 1, 2, 0, time.UTC)
	values := []billing.AuditEvent{
		{Event: "TOKEN_ISSUED", Org: "acme", Principal: "alice", Client: "agent-1", Operation: "upgrade_plan",
			ConfirmationID: "c1", Outcome: "issued", RequestID: "r1"},
		{Event: "TOKEN_REJECTED", Org: "acme", Principal: "Zoë 😀 \"quoted\"\n", Reason: "mismatch"},
		{Event: "", Org: "acme"},                                // every field empty
		{Event: "X", Org: "acme", Principal: "ab", Client: "c"}, // field boundaries: ("ab","c") vs ("a","bc")
		{Event: "X", Org: "acme", Principal: "a", Client: "bc"},
		// Events with a consent are hashed with version 3 (migration 000012).
		{Event: "OPERATION_EXECUTED", Org: "acme", Principal: "alice", ConfirmationID: "c1",
			Consent: &billing.Consent{Method: billing.ConsentAgentRelayed, HumanPresent: billing.HumanNone}},
		{Event: "OPERATION_EXECUTED", Org: "acme", Principal: "alice", ConfirmationID: "c2",
			Consent: &billing.Consent{Method: billing.ConsentVerifiedSignIn, HumanPresent: billing.HumanVerified,
				AuthTime: &authTime, ACR: "urn:passkey \"ü\""}},
		{Event: "OPERATION_EXECUTED", Org: "acme", Principal: "alice", ConfirmationID: "c3",
			Consent: &billing.Consent{Method: billing.ConsentApproved, HumanPresent: billing.HumanAttested, ApprovedBy: "bob"}},
		// The same consent fields shifted between neighbours hash apart.
		{Event: "OPERATION_EXECUTED", Org: "acme", Consent: &billing.Consent{Method: "ab", HumanPresent: "c"}},
		{Event: "OPERATION_EXECUTED", Org: "acme", Consent: &billing.Consent{Method: "a", HumanPresent: "bc"}},
	}
	if err := store.AppendAudit(ctx, values...); err != nil {
		t.Fatal(err)
	}
	// A time with all six fractional digits, and one with none.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_events (event, org, at) VALUES
		('T', 'acme', '2026-05-12 10:01:00.123456+02'), ('T', 'acme', '1999-12-31 23:59:59+00')`); err != nil {
		t.Fatal(err)
	}
	// An executed change with its receipt stored first, as a second call
	// stores them: its receipt is bound in (version 2); one without a
	// receipt is not.
	keyPEM, err := receipt.GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := receipt.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.KeySigner(key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := receipt.NewKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_r", Operation: billing.OpUpgrade})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO receipts (confirmation_id, org, principal, summary, receipt)
		VALUES ('cfm_r', 'acme', 'alice', 'Upgrade', $1)`, jws); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendAudit(ctx, billing.AuditEvent{Event: billing.EventOperationExecuted, Org: "acme", Principal: "alice",
		Operation: string(billing.OpUpgrade), ConfirmationID: "cfm_r", Outcome: "executed"}, billing.AuditEvent{Event: billing.EventOperationExecuted, Org: "acme",
		ConfirmationID: "cfm_none"}); err != nil {
		t.Fatal(err)
	}
	events := export(t, store, "acme")
	if len(events) != len(values)+4 {
		t.Fatalf("exported %d events, want %d", len(events), len(values)+4)
	}
	bound, unbound := events[len(events)-2], events[len(events)-1]
	if bound.ReceiptSHA256 != evidence.ReceiptSHA256(bound.Receipt) || bound.Receipt == "" || unbound.ReceiptSHA256 != "" {
		t.Fatalf("receipt binding: %+v, %+v", bound, unbound)
	}
	seen := map[string]bool{}
	for i, e := range events {
		if got := evidence.Hash(e); got != e.Hash {
			t.Errorf("event %d: Go hash %s, database hash %s", i, got, e.Hash)
		}
		if seen[e.Hash] {
			t.Errorf("event %d: hash repeats", i)
		}
		seen[e.Hash] = true
	}
	// A round trip through the export's JSON keeps every hashed byte.
	var buf bytes.Buffer
	stripped := 0 // the first line of an executed change with a consent and no receipt
	for i, e := range events {
		line, _ := json.Marshal(e)
		var back billing.ChainedEvent
		if err := json.Unmarshal(line, &back); err != nil || evidence.Hash(back) != e.Hash {
			t.Errorf("event %d: the hash changed through JSON (%v)", i, err)
		}
		buf.Write(append(line, '\n'))
		if stripped == 0 && e.Event == billing.EventOperationExecuted && e.Consent != nil && e.Receipt == "" {
			stripped = i + 1
		}
	}
	// The synthetic executed changes above have a consent (chain version 3)
	// and no receipt: what an export stripped of its receipts looks like.
	// Verify checks every line before and refuses that one.
	_, err = evidence.Verify(&buf, keys.JWKS(), evidence.Options{AllowUnsigned: true})
	var le *evidence.LineError
	if !errors.As(err, &le) || le.Line != stripped || !strings.Contains(err.Error(), "carries no receipt") {
		t.Fatalf("Verify(export) = %v, want line %d to carry no receipt", err, stripped)
	}
	// A consent changed, added or removed is caught.
	for name, edit := range map[string]func(*billing.ChainedEvent){
		"method changed":  func(e *billing.ChainedEvent) { e.Consent.Method = billing.ConsentMCPAppView },
		"consent removed": func(e *billing.ChainedEvent) { e.Consent = nil },
	} {
		e := events[len(values)-5]
		k := *e.Consent
		e.Consent = &k
		edit(&e)
		if evidence.Hash(e) == e.Hash {
			t.Errorf("%s: the hash did not change", name)
		}
	}
	plain := events[0]
	plain.Consent = &billing.Consent{Method: billing.ConsentPolicyAllow, HumanPresent: billing.HumanNone}
	if evidence.Hash(plain) == plain.Hash {
		t.Error("consent added: the hash did not change")
	}
	// The log is append-only.
	if _, err := db.Pool.Exec(ctx, `UPDATE audit_events SET reason = 'x'`); err == nil {
		t.Fatal("an audit event was updated")
	}
}

// TestChainConcurrentWriters: many writers of one org, on several
// connections of two pools (two replicas), in transactions and outside,
// still make one chain with no gaps and no forks.
func TestChainConcurrentWriters(t *testing.T) {
	db := testenv.NewDatabase(t)
	ctx := context.Background()
	var stores []*postgres.Store
	for range 2 {
		cfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores = append(stores, postgres.NewStore(pool))
	}
	const writers, rounds = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := range writers {
		wg.Go(func() {
			store := stores[w%2]
			for r := range rounds {
				ev := billing.AuditEvent{Event: "TOKEN_ISSUED", Org: "acme", Principal: fmt.Sprintf("p%d", w),
					RequestID: fmt.Sprintf("%d-%d", w, r)}
				if r%2 == 0 {
					errs <- store.AppendAudit(ctx, ev, ev)
					continue
				}
				errs <- store.InTx(ctx, func(tx billing.Tx) error {
					if err := tx.Record(ctx, billing.Record{Events: []billing.AuditEvent{ev}}); err != nil {
						return err
					}
					time.Sleep(time.Millisecond) // hold the chain head a little
					return tx.Record(ctx, billing.Record{Events: []billing.AuditEvent{ev}})
				})
			}
		})
	}
	// Another org's writer is never held up by this org's chain.
	if err := stores[0].AppendAudit(ctx, billing.AuditEvent{Event: "TOKEN_ISSUED", Org: "other"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	events := export(t, stores[0], "acme")
	if len(events) != writers*rounds*2 {
		t.Fatalf("chain has %d events, want %d", len(events), writers*rounds*2)
	}
	var buf bytes.Buffer
	for _, e := range events {
		line, _ := json.Marshal(e)
		buf.Write(append(line, '\n'))
	}
	rep, err := evidence.Verify(&buf, jose.JSONWebKeySet{}, evidence.Options{AllowUnsigned: true}) // the store exports no checkpoint
	if err != nil {
		t.Fatalf("chain of concurrent writers: %v", err)
	}
	if rep.HeadSeq != int64(writers*rounds*2) {
		t.Fatalf("head at %d", rep.HeadSeq)
	}
}

// TestReplicasStartingTogetherPublishEveryKey: replicas starting together
// each sign with a key of their own, made in memory, and every one of them
// publishes all of their public keys, so a receipt from any replica
// verifies against the keys any replica serves.
func TestReplicasStartingTogetherPublishEveryKey(t *testing.T) {
	db := testenv.NewDatabase(t)
	store := postgres.NewStore(db.Pool)
	ctx := context.Background()
	sets := make([]*receipt.Set, 8)
	var wg sync.WaitGroup
	for i := range sets {
		wg.Go(func() {
			k, err := receipt.Load(ctx, nil, store)
			if err != nil {
				t.Error(err)
				return
			}
			sets[i] = k
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, set := range sets {
		published, err := set.Published(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(published.Keys) < len(sets) {
			t.Fatalf("replica %d publishes %d keys, want all %d", i, len(published.Keys), len(sets))
		}
	}
}

// TestChainHashInlined: PostgreSQL inlines the chain's hash functions into
// one expression. A declaration stricter than the body (IMMUTABLE over
// STABLE to_char and convert_to, as 000006 had it) stops that, and every
// audit event then pays for fifteen SQL-function calls (migration 000008).
func TestChainHashInlined(t *testing.T) {
	db := testenv.NewDatabase(t)
	rows, err := db.Pool.Query(context.Background(), `EXPLAIN (VERBOSE, COSTS OFF)
		SELECT audit_event_hash('0', 'o', g, g, now(), 'e', 'p', 'c', 'op', 'cfm', 'ok', '', 'r'),
			audit_event_hash_v2('0', 'o', g, g, now(), 'e', 'p', 'c', 'op', 'cfm', 'ok', '', 'r', 'x') FROM generate_series(1, 2) g`)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := plan.String(); strings.Contains(p, "audit_event_hash(") || strings.Contains(p, "audit_event_hash_v2(") || strings.Contains(p, "audit_chain_field(") || !strings.Contains(p, "sha256(") {
		t.Fatalf("the hash functions are called, not inlined:\n%s", p)
	}
}

// TestNoSigningKeyInDatabase: whoever reads the database cannot sign
// (contract §11, key custody). A key an older billingd stored is retired
// when billingd starts (its public half kept, so its receipts still
// verify), a process without key files registers only its public key, and
// after a receipt is signed no column of any table holds a private key.
func TestNoSigningKeyInDatabase(t *testing.T) {
	db := testenv.NewDatabase(t)
	store := postgres.NewStore(db.Pool)
	ctx := context.Background()
	oldPEM, err := receipt.GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	// As a billingd before migration 000015 left it.
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE receipt_keys DISABLE TRIGGER receipt_keys_retired;
		INSERT INTO receipt_keys (name, private_key_pem) VALUES ('generated', '`+string(oldPEM)+`');
		ALTER TABLE receipt_keys ENABLE TRIGGER receipt_keys_retired`); err != nil {
		t.Fatal(err)
	}
	oldPriv, _ := receipt.ParsePrivateKeyPEM(oldPEM)
	oldSigner, _ := receipt.KeySigner(oldPriv)
	oldKeys, _ := receipt.NewKeys(oldSigner)
	oldReceipt, _ := oldKeys.SignReceipt(billing.ReceiptClaims{Org: "acme", ConfirmationID: "c0"})

	keys, err := receipt.Load(ctx, nil, store)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "c1", Operation: billing.OpUpgrade})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO receipts (confirmation_id, org, principal, summary, receipt)
		VALUES ('c1', 'acme', 'alice', 'Upgrade', $1)`, jws); err != nil {
		t.Fatal(err)
	}
	published, err := keys.Published(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{jws, oldReceipt} {
		if _, err := receipt.Verify(r, published); err != nil {
			t.Fatalf("published keys do not verify a receipt: %v", err)
		}
	}
	// Every text-like column of every table, read as text.
	cols, err := db.Pool.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = 'public' AND data_type IN ('text', 'jsonb', 'json', 'character varying', 'bytea')`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(cols, pgx.RowToStructByPos[struct{ Table, Column string }])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range names {
		var n int
		q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s::text LIKE '%%PRIVATE KEY%%' OR %s::text ~ '"d"\s*:'`,
			pgx.Identifier{c.Table}.Sanitize(), pgx.Identifier{c.Column}.Sanitize(), pgx.Identifier{c.Column}.Sanitize())
		if err := db.Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s.%s: %v", c.Table, c.Column, err)
		}
		if n != 0 {
			t.Errorf("%s.%s holds a private key in %d rows", c.Table, c.Column, n)
		}
	}
	// billingd cannot store one again, nor a private JWK.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO receipt_keys (name, private_key_pem) VALUES ('again', 'x')`); err == nil {
		t.Error("a key was stored in receipt_keys")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO receipt_public_keys (kid, jwk) VALUES ('k', '{"kty":"EC","d":"x"}')`); err == nil {
		t.Error("a private JWK was stored")
	}
}

package integration

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/config"
)

// statementRecorder is a pgx tracer that keeps every statement billingd
// sends, with its arguments.
type statementRecorder struct {
	mu    sync.Mutex
	calls []recordedStatement
}

type recordedStatement struct {
	sql  string
	args []any
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, recordedStatement{sql: data.SQL, args: data.Args})
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart keeps a batch's statements: most of the hot path is
// batched.
func (r *statementRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range data.Batch.QueuedQueries {
		r.calls = append(r.calls, recordedStatement{sql: q.SQL, args: q.Arguments})
	}
	return ctx
}

func (r *statementRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *statementRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestHotStatementsUseIndexes runs every kind of call against tables holding
// 200,000 confirmations, audit events and Stripe event ids, records the statements billingd
// sends, and asks PostgreSQL how it would run each: none may scan a growing
// table sequentially.
func TestHotStatementsUseIndexes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_PROPOSALS", "1000"),
		withEnv("RATE_LIMIT_FAILED_CONFIRMS", "1000"), withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("big", "Big", "pro")
	h.setPolicy("big", `{"rules":[],"daily_limit":100}`)
	fillHistory(t, h, 200_000)

	rec := &statementRecorder{}
	cfg, err := config.Load(func(k string) string { return h.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	traced, err := app.New(context.Background(), cfg, app.Options{Tracer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	exerciseEveryCall(t, h, traced, acct)

	seen := map[string]bool{}
	for _, st := range rec.calls {
		if seen[st.sql] || !touchesGrowingTable(st.sql) {
			continue
		}
		seen[st.sql] = true
		if scan := sequentialScan(t, h, st); scan != "" {
			t.Errorf("sequential scan of %s for:\n%s", scan, st.sql)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("only %d statements checked", len(seen))
	}
}

// fillHistory adds n finished confirmations and n audit events spread over
// 1,000 other orgs, as a long-running deployment would have.
func fillHistory(t *testing.T, h *harness, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO orgs (id, name, stripe_customer_id) SELECT 'old' || g, 'Old', 'cus_old' FROM generate_series(1, 1000) g`,
		`INSERT INTO confirmations (id, token_hash, org, principal, operation, status, from_plan, to_plan,
			from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency, proration_date,
			subscription_version, amount_due_cents, credit_cents, next_charge_at, summary, created_at, expires_at, finished_at)
		 SELECT 'cfm_old' || g, sha256(g::text::bytea), 'old' || (g % 1000 + 1), 'p' || (g % 50), 'upgrade_plan',
			'executed', 'pro', 'scale', 'price_a', 'price_b', 1900, 4900, 'usd', now(), 1, 100, 0, now(), 'old',
			now() - interval '10 minutes', now() - interval '9 minutes', now() - interval '9 minutes'
		 FROM generate_series(1, $1) g`,
		`INSERT INTO audit_events (event, org, principal, operation, confirmation_id, outcome, at)
		 SELECT (ARRAY['TOKEN_ISSUED','TOKEN_VALIDATED','OPERATION_EXECUTED'])[g % 3 + 1], 'old' || (g % 1000 + 1),
			'p' || (g % 50), 'upgrade_plan', 'cfm_old' || g, 'ok', now() - (g % 3600) * interval '1 second'
		 FROM generate_series(1, $1) g`,
		`INSERT INTO stripe_events (id, received_at) SELECT 'evt_old' || g, now() - (g % 600000) * interval '1 second'
		 FROM generate_series(1, $1) g`,
		`ANALYZE`,
	} {
		args := []any{}
		if strings.Contains(q, "$1") {
			args = append(args, n)
		}
		if _, err := h.db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("fill history: %v", err)
		}
	}
}

// exerciseEveryCall makes each kind of call once through the traced app.
func exerciseEveryCall(t *testing.T, h *harness, a *app.App, acct billing.Account) {
	t.Helper()
	ctx := context.Background()
	svc := a.Service
	alice := billing.Caller{Org: "big", Principal: "alice", Admin: true, RequestID: "r1"}
	bob := billing.Caller{Org: "big", Principal: "bob", RequestID: "r2"}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := svc.ChangePlan(ctx, alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
	must(p, err)
	must(svc.ChangePlan(ctx, alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})) // supersedes
	must(svc.PendingConfirmations(ctx, alice))
	must(svc.PendingConfirmations(ctx, bob))
	other, err := svc.ChangePlan(ctx, bob, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "free"})
	must(other, err)
	must(svc.Cancel(ctx, bob, other.ConfirmationID))
	_, _ = svc.ChangePlan(ctx, bob, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale", ConfirmToken: "pbc_" + strings.Repeat("A", 43)})
	latest, err := svc.ChangePlan(ctx, alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
	must(latest, err)
	must(svc.ChangePlan(ctx, alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale", ConfirmToken: latest.ConfirmToken}))
	must(svc.AuditLog(ctx, alice, 50, 0))
	must(svc.AuditLog(ctx, alice, 50, 1000))
	must(svc.Subscription(ctx, alice))
	must(svc.ReconcileSubscription(ctx, billing.SubscriptionEvent{EventID: "evt_idx", Created: time.Now(),
		SubscriptionID: acct.Subscription.StripeSubscriptionID, PriceID: "price_billingd_pro", Status: "active",
		CurrentPeriodEnd: acct.Subscription.CurrentPeriodEnd}))
	a.PurgeOnce(ctx)
	must(svc.ExpireApprovals(ctx, 10)) // every replica's round looks for lapsed approvals
}

func touchesGrowingTable(sql string) bool {
	s := strings.ToLower(sql)
	return (strings.Contains(s, "confirmations") || strings.Contains(s, "audit_events") || strings.Contains(s, "stripe_events")) &&
		!strings.HasPrefix(strings.TrimSpace(s), "insert into audit_events (event") // plain appends
}

// sequentialScan returns the growing table the plan of st scans
// sequentially, if any.
func sequentialScan(t *testing.T, h *harness, st recordedStatement) string {
	t.Helper()
	var plan []byte
	if err := h.db.Pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(plan, &nodes); err != nil {
		t.Fatal(err)
	}
	return findSeqScan(nodes[0]["Plan"])
}

func findSeqScan(node any) string {
	n, ok := node.(map[string]any)
	if !ok {
		return ""
	}
	if n["Node Type"] == "Seq Scan" {
		switch rel, _ := n["Relation Name"].(string); rel {
		case "confirmations", "audit_events", "stripe_events":
			return rel
		}
	}
	children, _ := n["Plans"].([]any)
	for _, c := range children {
		if rel := findSeqScan(c); rel != "" {
			return rel
		}
	}
	return ""
}

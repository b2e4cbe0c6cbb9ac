package main

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/jackc/pgx/v5"
)

// scripts are the pgbench mirrors of billingd's SQL, one per workload.
//
//go:embed scripts/*.sql
var scripts embed.FS

// withGaps makes a mirror script wait gap (pgbench's \sleep) after each of
// its round trips: a query ending in \gset, or a pipeline. billingd works
// between its statements (HTTP, JSON, Stripe), so its backends idle between
// round trips; pgbench sends the next at once, and an idle gap may make the
// same statements cost a backend more CPU (issue 39: on 29 November two
// quick runs with 0.7 ms gaps put the mirror's backends level with
// billingd's; later runs did not, explain.go). With gap 0 the script is as
// written: the database's ceiling.
func withGaps(script []byte, gap time.Duration) []byte {
	if gap <= 0 {
		return script
	}
	sleep := fmt.Sprintf("\\sleep %d us\n", gap.Microseconds())
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(script), "\n") {
		b.WriteString(line)
		if l := strings.TrimSpace(line); l == `\endpipeline` || strings.HasPrefix(l, `\gset`) {
			if !strings.HasSuffix(line, "\n") {
				b.WriteString("\n")
			}
			b.WriteString(sleep)
		}
	}
	return []byte(b.String())
}

// runPgbench runs the mirror script of w, waiting gap after each round
// trip (withGaps), for clients clients, on mirrorConnections of them, for
// the same warm-up and measured time as the service, and measures it the
// same way: from pgbench's per-transaction log, transactions completed in
// the window after the warm-up.
func (e *env) runPgbench(ctx context.Context, w workload, clients int, gap time.Duration) (sample, error) {
	clients = mirrorConnections(e.opts, clients)
	dir, err := os.MkdirTemp(e.tmp, fmt.Sprintf("pgbench-%s-%d-", w, clients))
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, string(w)+".sql")
	body, err := scripts.ReadFile("scripts/" + string(w) + ".sql")
	if err != nil {
		return sample{}, err
	}
	if err := os.WriteFile(script, withGaps(body, gap), 0o644); err != nil {
		return sample{}, err
	}
	seconds := int(math.Ceil((e.opts.warmup + e.opts.duration).Seconds())) + 1
	args := []string{"-n", "-M", "prepared", "-T", strconv.Itoa(seconds),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, runtime.NumCPU())),
		"-l", "--log-prefix", filepath.Join(dir, "log"), "-f", script}
	vars, err := e.pgbenchVars(ctx, clients)
	if err != nil {
		return sample{}, err
	}
	for _, v := range vars {
		args = append(args, "-D", v)
	}
	if err := e.resetStatements(ctx); err != nil {
		return sample{}, err
	}
	done0, err := e.mirrorDone(ctx, w)
	if err != nil {
		return sample{}, err
	}
	backends := watchBackends(ctx, e.pool, pgbenchApplicationName)
	waits := sampleWaits(ctx, e.pool, pgbenchApplicationName)
	cmd := e.pgbenchCommand(ctx, append(args, withApplicationName(e.dbURL, pgbenchApplicationName)))
	out, err := cmd.CombinedOutput()
	backendsUsed := backends.total()
	sampledWaits := waits.waits()
	if err != nil {
		return sample{}, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	stmts, err := e.readStatements(ctx)
	if err != nil {
		return sample{}, err
	}
	s, err := readPgbenchLogs(dir, e.opts.warmup, e.opts.duration)
	if err != nil {
		return sample{}, err
	}
	s.errors += failedTransactions(string(out))
	done1, err := e.mirrorDone(ctx, w)
	if err != nil {
		return sample{}, err
	}
	if did := done1 - done0; did < s.ops-s.errors {
		return sample{}, fmt.Errorf("the %s mirror did less than billingd does: %d of its %d transactions issued (propose) or executed (handshake) a confirmation", w, did, s.ops-s.errors)
	}
	s.cpu = cpuUse{postgres: backendsUsed.cpu, postgresSched: backendsUsed.scheduling, pgbench: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	s.stmts = stmts
	s.waits, s.active = sampledWaits, waits.active()
	return s, nil
}

// pgbenchVars binds the scripts' variables to what billingd sends for an
// upgrade from Pro to Scale by the bench's principals. pgbench cannot define
// an empty variable, so where billingd binds "" the scripts get a short
// value instead (see the scripts' comments): a few bytes, the same work.
func (e *env) pgbenchVars(ctx context.Context, clients int) ([]string, error) {
	result, receipt, err := e.billingdAnswer(ctx)
	if err != nil {
		return nil, err
	}
	pro, scale := planOf("pro"), planOf("scale")
	now := time.Now().UTC().Truncate(time.Second)
	periodEnd := now.Add(30 * 24 * time.Hour)
	summary := fmt.Sprintf("Upgrade Bench Org %d from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $15.00 due now; first full Scale charge on %s.",
		orgBase, periodEnd.Format("Jan 2, 2006"))
	vars := []struct {
		name  string
		value any
	}{
		{"org_base", orgBase}, {"clients", clients}, {"orgs_per_client", e.opts.orgs / clients},
		{"principals", e.opts.principals}, {"client", benchClient}, {"operation", billing.OpUpgrade},
		{"from_plan", pro.ID}, {"to_plan", scale.ID}, {"from_price", pro.StripePriceID}, {"to_price", scale.StripePriceID},
		{"from_cents", pro.AmountCents}, {"to_cents", scale.AmountCents}, {"currency", scale.Currency},
		{"proration_date", now.Format(time.RFC3339)}, {"version", 1}, {"due_cents", 1500}, {"credit_cents", 0},
		{"next_charge_at", periodEnd.Format(time.RFC3339)}, {"summary", summary},
		{"ttl_us", e.cfg.ConfirmTTL.Microseconds()}, {"window_us", e.cfg.RateLimits.Window.Microseconds()},
		{"request_id", "bench-request-0123456789abcdef"}, {"synced_at", now.Format(time.RFC3339)},
		{"ev_issued", billing.EventTokenIssued}, {"ok", "ok"},
		{"executed", billing.StatusExecuted}, {"sub_status", "active"}, {"period_end", periodEnd.Format(time.RFC3339)},
		{"item_id", "si_bench"}, {"ev_validated", billing.EventTokenValidated}, {"ev_executed", billing.EventOperationExecuted},
		{"receipt", receipt},
		{"subtotal_cents", 1500}, {"discount_cents", 0}, {"tax_cents", 0}, {"applied_cents", 0}, {"no_consent", "null"},
		{"at_period_end", "false"}, {"no_renewal", "null"}, {"no_cancels", "null"}, {"no_scheduled", "null"},
		{"consent", `{"method":"agent_relayed","human_present":"none"}`},
		{"lock_wait", "50ms"}, {"reason", "-"}, {"approval", billing.ApprovalGranted}, {"agent", false}, {"verify_required", false}, {"livemode", false}, {"attempt", 0},
		{"approvals_required", 1}, {"quantity", 1}, {"person_required", billing.ReasonPersonRequired},
		// The cancellation columns (pgbench takes no empty value: a
		// cancellation's own values, which only fill the same columns).
		{"quantity_to", 0}, {"cancellation", billing.CancelNow}, {"cancel_reason", "unused"}, {"cancel_comment", "-"},
		{"pending_cancel", false}, {"pending_cancel_after", false}, {"canceled_at", periodEnd.Format(time.RFC3339)},
		{"result", result},
	}
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = fmt.Sprintf("%s=%v", v.name, v.value)
	}
	return out, nil
}

// billingdAnswer is the answer and the receipt billingd stored for an
// executed upgrade, which the mirror stores too: their bytes decide
// whether PostgreSQL compresses the row (the answer carries the receipt,
// a JWS that compresses as little as random text, unlike a run of one
// letter). Read once, before any old rows are added; before billingd
// executed any, a receipt-sized stand-in.
func (e *env) billingdAnswer(ctx context.Context) (result, receipt string, err error) {
	if e.answer != "" {
		return e.answer, e.receipt, nil
	}
	err = e.pool.QueryRow(ctx, `SELECT c.result::text, r.receipt FROM confirmations c
		JOIN receipts r ON r.confirmation_id = c.id
		WHERE c.status = 'executed' AND c.operation = 'upgrade_plan' AND c.result IS NOT NULL
		ORDER BY c.finished_at DESC LIMIT 1`).Scan(&result, &receipt)
	if errors.Is(err, pgx.ErrNoRows) {
		return `{"ok":true}`, strings.Repeat("R", 1100), nil
	}
	if err == nil {
		e.answer, e.receipt = result, receipt
	}
	return result, receipt, err
}

func planOf(id string) billing.Plan {
	for _, p := range billing.DefaultPlans() {
		if p.ID == id {
			return p
		}
	}
	panic("no default plan " + id)
}

// readPgbenchLogs reads pgbench's per-transaction logs (one file per
// thread): "client transaction latency_us script epoch_s epoch_us". The
// window starts warmup after the first completion.
func readPgbenchLogs(dir string, warmup, duration time.Duration) (sample, error) {
	files, err := filepath.Glob(filepath.Join(dir, "log.*"))
	if err != nil || len(files) == 0 {
		return sample{}, fmt.Errorf("no pgbench logs in %s", dir)
	}
	type tx struct {
		end     time.Time
		latency time.Duration
	}
	var txs []tx
	s := sample{duration: duration}
	first := time.Time{}
	for _, f := range files {
		err := eachLogLine(f, func(fields []string) {
			lat, err1 := strconv.ParseInt(fields[2], 10, 64)
			sec, err2 := strconv.ParseInt(fields[4], 10, 64)
			usec, err3 := strconv.ParseInt(fields[5], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				s.fail(fmt.Errorf("pgbench transaction %s", strings.Join(fields, " ")))
				return
			}
			end := time.Unix(sec, usec*1000)
			s.ops++
			txs = append(txs, tx{end: end, latency: time.Duration(lat) * time.Microsecond})
			if first.IsZero() || end.Before(first) {
				first = end
			}
		})
		if err != nil {
			return sample{}, err
		}
	}
	win := window{from: first.Add(warmup), to: first.Add(warmup + duration)}
	for _, t := range txs {
		if win.contains(t.end) {
			s.latencies = append(s.latencies, t.latency)
		}
	}
	return s, nil
}

func eachLogLine(path string, fn func(fields []string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 6 {
			fn(fields)
		}
	}
	return sc.Err()
}

// failedTransactions reads "number of failed transactions: N (…)" from
// pgbench's summary (PostgreSQL 15 and later print it).
func failedTransactions(out string) int {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "number of failed transactions: "); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}

// mirrorDone counts what a mirror's transactions leave behind when they do
// billingd's work: a confirmation per first call, an executed one per
// handshake. runPgbench compares it with the transactions pgbench counted,
// so a script whose statements match nothing (a stale subscription version,
// a token nobody issued) fails the run instead of measuring less work.
func (e *env) mirrorDone(ctx context.Context, w workload) (int, error) {
	query := `SELECT count(*) FROM confirmations`
	if w == handshake {
		query += ` WHERE status = 'executed'`
	}
	var n int
	if err := e.pool.QueryRow(ctx, query).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the mirror's confirmations: %w", err)
	}
	return n, nil
}

// mirrorConnections is how many connections the mirror runs for clients
// clients: as many, up to billingd's main pool (options.mainPool), which
// takes any number of clients for billingd's first calls. The mirror is
// the database's ceiling for billingd's statements, and on a 2-core machine
// pgbench does less beyond that, not more: with 64 connections its
// backends queue on the WAL write lock, and by how much it fell differed
// from run to run (28 November, AMD EPYC, the same code: 64-client
// handshake ratios of 85%, 71% and 97%), so a ratio against it measured
// the mirror's collapse. At 64 clients the cap is 16 for both workloads,
// although billingd's second calls also hold connections of its executions
// pool (up to 32 more): what those cost counts against billingd.
func mirrorConnections(o options, clients int) int { return min(clients, o.mainPool()) }

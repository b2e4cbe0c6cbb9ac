package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// results is everything one run measured, for the report.
type results struct {
	started    time.Time
	elapsed    time.Duration
	machine    machine
	trips      []roundTrips
	throughput []comparison
	dataSizes  []dataSize
	latency    []latencyRow // at Stripe's pace (latency.go)
	peakRSSKiB int64
	loadBefore string // /proc/loadavg: other work on the machine skews everything
	loadAfter  string
	pinned     string // -pin: where each side ran
}

// comparison is billingd and its pgbench mirror doing one workload at one
// concurrency, one after the other on the same database.
type comparison struct {
	workload workload
	clients  int
	service  summary
	pgbench  summary
	rssKiB   int64 // billingd's resident set right after its run
}

func (c comparison) ratio() float64 {
	if c.pgbench.rate == 0 {
		return 0
	}
	return c.service.rate / c.pgbench.rate
}

// dataSize is propose and handshake with some number of old rows.
type dataSize struct {
	oldRows   int
	rows      int // all confirmations: the old ones and those earlier runs made
	propose   comparison
	handshake comparison
}

// runPhases runs everything the report shows, in order: round trips (on a
// quiet database), throughput at each concurrency, then the data sizes,
// which only add rows.
func runPhases(ctx context.Context, e *env) (results, error) {
	res := results{started: time.Now(), machine: describeMachine(ctx, e.pool), loadBefore: loadAverage()}
	e.log.Printf("machine: %s; load average %s", res.machine, res.loadBefore)
	if e.statements = e.statementStats(ctx); !e.statements {
		e.log.Printf("pg_stat_statements is not in shared_preload_libraries: no per-statement table")
	}
	var err error
	if e.opts.latencyOnly {
		return e.latencyOnly(ctx, res)
	}
	if res.trips, err = e.countRoundTrips(ctx); err != nil {
		return results{}, fmt.Errorf("count round trips: %w", err)
	}
	for _, t := range res.trips {
		e.log.Printf("round trips, %s: %d (min %d, max %d): %v", t.call, t.median, t.min, t.max, t.example)
	}
	if err := e.warmUp(ctx); err != nil {
		return results{}, err
	}
	for _, w := range []workload{propose, handshake} {
		for _, c := range e.opts.clients {
			row, err := e.compare(ctx, w, c)
			if err != nil {
				return results{}, err
			}
			res.throughput = append(res.throughput, row)
		}
	}
	// At Stripe's pace before the old rows are added: these rows measure
	// waiting, not the tables.
	if res.latency, err = e.runLatency(ctx); err != nil {
		return results{}, err
	}
	if res.dataSizes, err = e.runDataSizes(ctx); err != nil {
		return results{}, err
	}
	if _, res.peakRSSKiB, err = memoryKiB(e.billingd.Process.Pid); err != nil {
		return results{}, err
	}
	res.elapsed, res.loadAfter = time.Since(res.started), loadAverage()
	if e.pinned != nil {
		res.pinned = e.pinned.String()
	}
	return res, nil
}

// warmUp gives the tables some rows before anything is measured: on empty
// tables billingd's connections would cache plans made for empty tables.
func (e *env) warmUp(ctx context.Context) error {
	c := caller{hc: newHTTPClient(16), base: e.baseURL}
	s := load(ctx, c, e.accounts, handshake, 16, newWindow(0, 3*time.Second))
	c.hc.CloseIdleConnections()
	if s.errors > 0 {
		return fmt.Errorf("warm-up: %d errors, first: %v", s.errors, s.firstErrs)
	}
	e.log.Printf("warm-up: %d handshakes", len(s.latencies))
	return nil
}

// runDataSizes grows the confirmations by each size of -old-rows in turn
// and measures propose and handshake at -data-clients. The first size (0)
// is the table as the earlier runs left it.
func (e *env) runDataSizes(ctx context.Context) ([]dataSize, error) {
	var sizes []dataSize
	have := 0
	for _, n := range e.opts.oldRows {
		if err := e.addOldRows(ctx, have, n); err != nil {
			return nil, err
		}
		have = n
		d := dataSize{oldRows: n}
		var err error
		if d.rows, err = e.confirmationRows(ctx); err != nil {
			return nil, err
		}
		if d.propose, err = e.compare(ctx, propose, e.opts.dataClients); err != nil {
			return nil, err
		}
		if d.handshake, err = e.compare(ctx, handshake, e.opts.dataClients); err != nil {
			return nil, err
		}
		sizes = append(sizes, d)
	}
	return sizes, nil
}

// compare runs w at clients concurrency against billingd, then its pgbench
// mirror, each from the same settled state (see settle).
func (e *env) compare(ctx context.Context, w workload, clients int) (comparison, error) {
	row := comparison{workload: w, clients: clients}
	if err := e.syncPlans(ctx); err != nil {
		return comparison{}, err
	}
	if err := e.settle(ctx); err != nil {
		return comparison{}, err
	}
	s, err := e.runService(ctx, w, clients)
	if err != nil {
		return comparison{}, err
	}
	row.service = summarize(s)
	if row.rssKiB, _, err = memoryKiB(e.billingd.Process.Pid); err != nil {
		return comparison{}, err
	}
	if err := e.settle(ctx); err != nil {
		return comparison{}, err
	}
	e.waitConnectionsClosed(ctx)
	pg, err := e.runPgbench(ctx, w, clients)
	if err != nil {
		return comparison{}, err
	}
	row.pgbench = summarize(pg)
	sc, pc := row.service.cpu, row.pgbench.cpu
	e.log.Printf("%-9s %2d clients: backends active at once (mean / most): billingd's %s, the mirror's %s",
		w, clients, row.service.active, row.pgbench.active)
	e.log.Printf("%-9s %2d clients: billingd %5.0f/s p50 %6.2f p99 %6.2f max %7.2f ms, %d errors, %d shed, CPU µs/op %.0f (billingd %.0f, bench %.0f, PostgreSQL %.0f) | pgbench %5.0f/s p50 %6.2f p99 %6.2f ms, CPU µs/op %.0f (PostgreSQL %.0f, pgbench %.0f) | %3.0f%%",
		w, clients, row.service.rate, ms(row.service.p50), ms(row.service.p99), ms(row.service.max), row.service.errors, row.service.shed,
		sc.total(), sc.billingd, sc.bench, sc.postgres,
		row.pgbench.rate, ms(row.pgbench.p50), ms(row.pgbench.p99), pc.total(), pc.postgres, pc.pgbench, 100*row.ratio())
	for _, msg := range append(row.service.firstErrs, row.pgbench.firstErrs...) {
		e.log.Printf("  error: %s", msg)
	}
	return row, nil
}

// runService drives billingd and measures where the CPU went meanwhile.
func (e *env) runService(ctx context.Context, w workload, clients int) (sample, error) {
	pid := e.billingd.Process.Pid
	backends := watchBackends(ctx, e.pool, "billingd")
	waits := sampleWaits(ctx, e.pool, "billingd")
	billingd0, err := processCPU(pid)
	if err != nil {
		return sample{}, err
	}
	self0 := selfCPU()
	if err := e.resetStatements(ctx); err != nil {
		return sample{}, err
	}
	stopProfile, err := e.profileRun(ctx, w, clients, e.opts.warmup+e.opts.duration)
	if err != nil {
		return sample{}, err
	}
	c := caller{hc: newHTTPClient(clients), base: e.baseURL}
	s := load(ctx, c, e.accounts, w, clients, newWindow(e.opts.warmup, e.opts.duration))
	c.hc.CloseIdleConnections()
	billingd1, err := processCPU(pid)
	if err != nil {
		return sample{}, err
	}
	if err := stopProfile(); err != nil {
		return sample{}, err
	}
	s.cpu = cpuUse{billingd: billingd1 - billingd0, bench: selfCPU() - self0, postgres: backends.total()}
	s.waits = waits.waits()
	s.active = waits.active()
	if s.stmts, err = e.readStatements(ctx); err != nil {
		return sample{}, err
	}
	return s, ctx.Err()
}

// syncPlans reads every org's plan back from the database: the pgbench
// handshake mirror changes plans too, and a client that asked for the plan
// an org is already on would get a no-op, not a proposal. The canned Stripe
// is told as well: billingd checks the subscription there before a change.
func (e *env) syncPlans(ctx context.Context) error {
	rows, err := e.pool.Query(ctx, `SELECT org, plan, stripe_subscription_id, stripe_item_id, current_period_end FROM subscriptions`)
	if err != nil {
		return fmt.Errorf("read plans: %w", err)
	}
	plans := map[string]string{}
	var org, plan, subID, itemID string
	var periodEnd time.Time
	if _, err := pgx.ForEachRow(rows, []any{&org, &plan, &subID, &itemID, &periodEnd}, func() error {
		plans[org] = plan
		if e.canned != nil {
			e.canned.set(subID, itemID, planOf(plan).StripePriceID, periodEnd)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read plans: %w", err)
	}
	for _, a := range e.accounts {
		a.plan = plans[a.id]
	}
	return nil
}

// latencyOnly runs the rows at Stripe's pace alone (-latency-only).
func (e *env) latencyOnly(ctx context.Context, res results) (results, error) {
	if err := e.warmUp(ctx); err != nil {
		return results{}, err
	}
	var err error
	if res.latency, err = e.runLatency(ctx); err != nil {
		return results{}, err
	}
	if _, res.peakRSSKiB, err = memoryKiB(e.billingd.Process.Pid); err != nil {
		return results{}, err
	}
	res.elapsed, res.loadAfter = time.Since(res.started), loadAverage()
	return res, nil
}

// waitConnectionsClosed gives billingd's pools up to 10 s to close the
// connections the run left idle (see withPoolSize), so that pgbench finds
// room on a server the bench does not own; its own cluster has room.
func (e *env) waitConnectionsClosed(ctx context.Context) {
	if e.privateServer {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var open int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'billingd%'`).Scan(&open)
		if err != nil || open <= 2 {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

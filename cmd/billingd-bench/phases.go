package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/billingd/billingd/internal/postgres"
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
	idle       comparison   // the target row against a mirror that idles (explain.go)
	pinnedRow  comparison   // the target row pinned (explain.go); pinned is a whole run's
	peakRSSKiB int64
	ceiling    commitCeiling // the disk's flushes per second (ceiling.go)
	loadBefore string        // /proc/loadavg: other work on the machine skews everything
	loadAfter  string
	pinned     string // -pin: where each side ran
	tokenCheck tokenCheck
}

// comparison is billingd and its pgbench mirror doing one workload at one
// concurrency on the same database, alternately, -rounds times each
// (rounds.go).
type comparison struct {
	workload workload
	clients  int
	mirror   int           // the mirror's connections (mirrorConnections)
	gap      time.Duration // the mirror's wait after each round trip (withGaps); 0: back to back
	pinned   string        // where each side ran, when this row alone was pinned (explain.go)
	service  side          // billingd's rounds
	pgbench  side          // the mirror's rounds
	rssKiB   int64         // billingd's largest resident set right after a round
	elapsed  time.Duration // the row's wall time, every round and settle
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
	res.ceiling = e.measureCommitCeiling(ctx)
	e.log.Printf("commit ceiling: %s", res.ceiling)
	if res.trips, err = e.countRoundTrips(ctx); err != nil {
		return results{}, fmt.Errorf("count round trips: %w", err)
	}
	for _, t := range res.trips {
		e.log.Printf("round trips, %s: %d (min %d, max %d), %d commits waiting for the WAL flush: %v", t.call, t.median, t.min, t.max, t.commits, t.example)
	}
	if res.tokenCheck, err = e.warmUp(ctx); err != nil {
		return results{}, err
	}
	for _, w := range []workload{propose, handshake} {
		for _, c := range e.opts.clients {
			row, err := e.compare(ctx, w, c, e.opts.mirrorGap)
			if err != nil {
				return results{}, err
			}
			res.throughput = append(res.throughput, row)
		}
	}
	if res.idle, err = e.runIdleMirror(ctx, res.throughput); err != nil {
		return results{}, err
	}
	if res.pinnedRow, err = e.runPinnedRow(ctx, res.throughput); err != nil {
		return results{}, err
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
// Then it presents every principal's token, twice (tokenCheck).
func (e *env) warmUp(ctx context.Context) (tokenCheck, error) {
	c := caller{hc: newHTTPClient(16), base: e.baseURL}
	defer c.hc.CloseIdleConnections()
	s := load(ctx, c, e.accounts, handshake, 16, newWindow(0, 3*time.Second))
	if s.errors > 0 {
		return tokenCheck{}, fmt.Errorf("warm-up: %d errors, first: %v", s.errors, s.firstErrs)
	}
	e.log.Printf("warm-up: %d handshakes", len(s.latencies))
	check, err := e.checkTokens(ctx, c)
	if err != nil {
		return tokenCheck{}, fmt.Errorf("warm-up: %w", err)
	}
	e.log.Printf("warm-up: %s", check)
	return check, nil
}

// tokenCheck is what billingd's first check of a token costs: its CPU per
// call over calls with tokens it has not seen (first) and over the same
// calls again (again), every one a GET /api/billing/plans.
type tokenCheck struct {
	tokens       int
	first, again time.Duration
}

func (t tokenCheck) String() string {
	return fmt.Sprintf("%d tokens presented twice: billingd's CPU per call %.0f µs the first time, %.0f µs the second; "+
		"a token's first check costs %.0f µs", t.tokens, us(t.first), us(t.again), us(t.first-t.again))
}

// checkTokens presents every principal's token twice (presentTokens),
// measuring billingd's CPU each time.
func (e *env) checkTokens(ctx context.Context, c caller) (tokenCheck, error) {
	var check tokenCheck
	for _, into := range []*time.Duration{&check.first, &check.again} {
		before, err := processCPU(e.billingd.Process.Pid)
		if err != nil {
			return tokenCheck{}, err
		}
		if check.tokens, err = presentTokens(ctx, c, e.accounts, 16); err != nil {
			return tokenCheck{}, err
		}
		after, err := processCPU(e.billingd.Process.Pid)
		if err != nil {
			return tokenCheck{}, err
		}
		*into = (after - before) / time.Duration(check.tokens)
	}
	return check, nil
}

// presentTokens sends one cheap authenticated read (GET /api/billing/plans:
// no database, no rate limit) with every principal's token, so that every
// row measures calls with a token billingd has checked before, as a
// client's calls are after its first one (internal/auth/cache.go). Without
// it, how many of a row's calls paid for a full ES256 check depended on
// how many calls the rows before it had made: the first rows paid for
// most of the 20,000 tokens, the later ones for none. What the check costs
// is reported apart (tokenCheck). It stops at the first failure.
func presentTokens(ctx context.Context, c caller, accounts []*account, clients int) (int, error) {
	var bearers []string
	for _, a := range accounts {
		for _, u := range a.users {
			bearers = append(bearers, u.bearer)
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(clients)
	for _, b := range bearers {
		g.Go(func() error { return c.get(ctx, "/api/billing/plans", b) })
	}
	return len(bearers), g.Wait()
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
		if d.propose, err = e.compare(ctx, propose, e.opts.dataClients, e.opts.mirrorGap); err != nil {
			return nil, err
		}
		if d.handshake, err = e.compare(ctx, handshake, e.opts.dataClients, e.opts.mirrorGap); err != nil {
			return nil, err
		}
		sizes = append(sizes, d)
	}
	return sizes, nil
}

// compare runs w at clients concurrency against billingd and its pgbench
// mirror, alternately, -rounds times each (rounds.go), every run from the
// same settled state (see settle). The mirror waits gap after each of its
// round trips (withGaps); 0 makes it the database's ceiling.
func (e *env) compare(ctx context.Context, w workload, clients int, gap time.Duration) (comparison, error) {
	row, start := comparison{workload: w, clients: clients, mirror: mirrorConnections(e.opts, clients), gap: gap}, time.Now()
	billingdRound := func(round int) (summary, error) {
		s, rss, err := e.billingdRound(ctx, w, clients, round)
		row.rssKiB = max(row.rssKiB, rss)
		return s, err
	}
	mirrorRound := func(round int) (summary, error) { return e.mirrorRound(ctx, w, clients, round, gap) }
	var err error
	if row.service, row.pgbench, err = alternate(e.opts.rounds, billingdRound, mirrorRound); err != nil {
		return comparison{}, fmt.Errorf("%s at %d clients: %w", w, clients, err)
	}
	row.elapsed = time.Since(start)
	e.logComparison(row)
	return row, nil
}

// billingdRound is one billingd run of a row, and billingd's resident set
// right after it.
func (e *env) billingdRound(ctx context.Context, w workload, clients, round int) (summary, int64, error) {
	// The mirror changes plans too: read them back before every run.
	if err := e.syncPlans(ctx); err != nil {
		return summary{}, 0, err
	}
	if err := e.settle(ctx); err != nil {
		return summary{}, 0, err
	}
	s, err := e.runService(ctx, w, clients, round)
	if err != nil {
		return summary{}, 0, err
	}
	rss, _, err := memoryKiB(e.billingd.Process.Pid)
	sum := summarize(s)
	e.log.Printf("%-9s %2d clients, round %d: billingd %5.0f/s p50 %6.2f p99 %6.2f ms", w, clients, round, sum.rate, ms(sum.p50), ms(sum.p99))
	return sum, rss, err
}

// mirrorRound is one pgbench run of a row.
func (e *env) mirrorRound(ctx context.Context, w workload, clients, round int, gap time.Duration) (summary, error) {
	if err := e.settle(ctx); err != nil {
		return summary{}, err
	}
	e.waitConnectionsClosed(ctx)
	pg, err := e.runPgbench(ctx, w, clients, gap)
	if err != nil {
		return summary{}, err
	}
	sum := summarize(pg)
	idling := ""
	if gap > 0 {
		idling = fmt.Sprintf(", idling %s per round trip", gap)
	}
	e.log.Printf("%-9s %2d clients, round %d: pgbench  %5.0f/s p50 %6.2f p99 %6.2f ms%s", w, clients, round, sum.rate, ms(sum.p50), ms(sum.p99), idling)
	return sum, nil
}

// logComparison prints a row's medians over its rounds, and its errors.
func (e *env) logComparison(row comparison) {
	w, clients, s, p := row.workload, row.clients, row.service, row.pgbench
	e.log.Printf("%-9s %2d clients: backends active at once (mean / most), median round: billingd's %s, the mirror's %s",
		w, clients, s.typical().active, p.typical().active)
	total := func(c cpuPerOp) float64 { return c.total() }
	ratio := row.ratio()
	e.log.Printf("%-9s %2d clients, medians of %d rounds: billingd %5.0f/s (spread %s) p50 %6.2f p99 %6.2f ms, %d errors, %d shed, CPU µs/op %.0f | pgbench %5.0f/s (spread %s) p50 %6.2f p99 %6.2f ms, CPU µs/op %.0f | ratio %s (rounds %s–%s)",
		w, clients, len(s), s.rate().median, pct(s.rate().relative()), s.p50().median, s.p99().median, s.errors(), s.shed(), s.cpu(total).median,
		p.rate().median, pct(p.rate().relative()), p.p50().median, p.p99().median, p.cpu(total).median, pct(ratio.median), pct(ratio.min), pct(ratio.max))
	for _, msg := range append(s.firstErrs(), p.firstErrs()...) {
		e.log.Printf("  error: %s", msg)
	}
}

// runService drives billingd and measures where the CPU went meanwhile.
func (e *env) runService(ctx context.Context, w workload, clients, round int) (sample, error) {
	pid := e.billingd.Process.Pid
	backends := watchBackends(ctx, e.pool, billingdApplicationName)
	waits := sampleWaits(ctx, e.pool, billingdApplicationName)
	// The scrape first: its own CPU falls outside the CPU counted.
	allocated0, err := readAllocated(ctx, e.metricsAddr)
	if err != nil {
		return sample{}, err
	}
	billingd0, err := processUsage(pid)
	if err != nil {
		return sample{}, err
	}
	self0 := selfCPU()
	if err := e.resetStatements(ctx); err != nil {
		return sample{}, err
	}
	stopProfile, err := e.profileRun(ctx, w, clients, round, e.opts.warmup+e.opts.duration)
	if err != nil {
		return sample{}, err
	}
	c := caller{hc: newHTTPClient(clients), base: e.baseURL}
	s := load(ctx, c, e.accounts, w, clients, newWindow(e.opts.warmup, e.opts.duration))
	c.hc.CloseIdleConnections()
	billingd1, err := processUsage(pid)
	if err != nil {
		return sample{}, err
	}
	self1 := selfCPU()
	if err := stopProfile(); err != nil {
		return sample{}, err
	}
	// After the profiles, so that a profiled run's count always holds what
	// the profiler allocated, never by chance half of it.
	allocated1, err := readAllocated(ctx, e.metricsAddr)
	if err != nil {
		return sample{}, err
	}
	used, backendsUsed := billingd1.since(billingd0), backends.total()
	s.cpu = cpuUse{billingd: used.cpu, bench: self1 - self0, postgres: backendsUsed.cpu, postgresSched: backendsUsed.scheduling,
		billingdKernel: used.kernel, billingdReadsWrites: used.readsWrites, billingdAllocBytes: allocated1 - allocated0}
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
	var err error
	if res.tokenCheck, err = e.warmUp(ctx); err != nil {
		return results{}, err
	}
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
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE `+postgres.ReplicaBackends, billingdApplicationName).Scan(&open)
		if err != nil || open <= 2 {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Markers of the results in a documentation page (docs/performance.md):
// make bench replaces what is between them with the latest results, so the
// page never shows numbers no run produced.
const (
	docBegin = "<!-- bench:begin -->"
	docEnd   = "<!-- bench:end -->"
)

// writeReport prints the results as markdown and writes them where the
// options say.
func writeReport(opts options, res results, log *logger) error {
	body := renderResults(opts, res)
	fmt.Fprint(log.w, "\n"+body)
	if opts.out != "" {
		doc := "# billingd benchmark results\n\nWritten by `make bench` (cmd/billingd-bench); do not edit.\n\n" + body
		if err := os.WriteFile(opts.out, []byte(doc), 0o644); err != nil {
			return err
		}
		log.Printf("wrote %s", opts.out)
	}
	if opts.doc != "" {
		if err := updateDoc(opts.doc, body); err != nil {
			return err
		}
		log.Printf("updated %s", opts.doc)
	}
	return nil
}

func renderResults(opts options, res results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s in %s with `%s`.\n\n", res.started.UTC().Format("2006-01-02 15:04 MST"),
		res.elapsed.Round(time.Second), opts.command())
	fmt.Fprintf(&b, "Machine: %s. Load average before / after the run: %s / %s "+
		"(anything above 0 is other work sharing the machine, which skews both columns).\n\n", res.machine, res.loadBefore, res.loadAfter)
	fmt.Fprintf(&b, "Setup: the real `billingd serve` binary (connection pools: %s), %d orgs × %d principals with real ES256 JWTs, "+
		"each presented before the first row (so every row's calls come with a token billingd has checked before, as a client's do after its first), "+
		"Stripe stand-in `%s` on loopback, each client owning its own orgs.", poolDescription(opts), opts.orgs, opts.principals, opts.stripe)
	if res.tokenCheck.tokens > 0 {
		fmt.Fprintf(&b, " A token's first check (ES256) is the cost those rows leave out: %s.", res.tokenCheck)
	}
	if len(res.throughput) > 0 {
		fmt.Fprintf(&b, " Every row but those at Stripe's pace: %s; "+
			"pgbench runs scripts/ (billingd's statements, checked by scripts_test.go) with `-M prepared` and as many connections as clients, up to billingd's main pool (%d): beyond it pgbench's backends queue on the WAL write lock and the mirror, by a different amount each run, stops being a ceiling.",
			roundsText(opts), opts.mainPool())
		if opts.mirrorGap > 0 {
			fmt.Fprintf(&b, " **The mirror waits %s after each of its round trips** (`-mirror-gap`): its rows are no ceiling, only a comparison of what the statements cost PostgreSQL when its backends idle between them, as billingd's do.",
				opts.mirrorGap)
		}
	}
	b.WriteString("\n\n")
	if res.pinned != "" {
		fmt.Fprintf(&b, "**CPU-pinned run** (`-pin`, taskset): %s.\n\n", res.pinned)
	}
	if len(res.throughput) > 0 {
		writeThroughput(&b, res.throughput)
		writeCeiling(&b, res.ceiling, res.trips)
		writeRounds(&b, res.throughput)
		writeCPUBudget(&b, res.throughput)
		writeExplanations(&b, res)
		writeOwnCPU(&b, res.throughput, res.machine.syscall)
		writeStatements(&b, res.throughput)
		writeWaits(&b, res.throughput)
		writeScheduling(&b, res.throughput)
	}
	writeLatency(&b, opts, res.latency)
	if len(res.throughput) > 0 {
		writeDataSizes(&b, opts, res.dataSizes)
		writeRoundTrips(&b, res.trips)
	}
	writeFailpoints(&b, measureFailpoints(res.throughput))
	writeTraces(&b, measureTraces(res.throughput))
	fmt.Fprintf(&b, "### Memory\n\nPeak RSS of the billingd process over the whole run (VmHWM): **%.1f MiB**.\n\n", mib(res.peakRSSKiB))
	if len(res.throughput) > 0 {
		writeTargets(&b, opts, res)
	}
	writeLatencyTargets(&b, opts, res.latency)
	return b.String()
}

func poolDescription(opts options) string {
	d := "billingd's defaults: 16 connections, and 32 for executions (CONFIRM_CONCURRENCY)"
	if opts.poolMaxConns != 0 {
		d = fmt.Sprintf("pool_max_conns=%d, and 32 for executions (CONFIRM_CONCURRENCY)", opts.poolMaxConns)
	}
	if len(opts.billingdEnv) > 0 {
		d += fmt.Sprintf("; billingd's environment adds `%s` (-billingd-env), which may change them", strings.Join(opts.billingdEnv, " "))
	}
	return d
}

func (o options) command() string {
	if len(o.args) == 0 {
		return "make bench"
	}
	return "make bench BENCH_FLAGS='" + strings.Join(o.args, " ") + "'"
}

func writeRoundTrips(b *strings.Builder, trips []roundTrips) {
	b.WriteString("### Database round trips per call\n\n")
	fmt.Fprintf(b, "Counted by a pgx tracer on billingd built in process by app.New, over %d handshakes after warm-up "+
		"(BEGIN and COMMIT count; a batch is one). Commits waiting for the WAL flush: transactions, explicit or a batch's "+
		"implicit one, that wrote or locked a row (ceiling.go).\n\n", roundTripSamples)
	b.WriteString("| call | round trips (median) | min | max | commits waiting for the WAL flush | one call's exchanges |\n|---|--:|--:|--:|--:|---|\n")
	var missing []string
	for _, t := range trips {
		ex := make([]string, len(t.example))
		for i, x := range t.example {
			ex[i] = x.String()
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %s |\n", t.call, t.median, t.min, t.max, t.commits, strings.Join(ex, " → "))
		missing = append(missing, t.unmirrored...)
	}
	if len(missing) == 0 {
		b.WriteString("\nMirror check: every statement these calls sent is in the pgbench scripts.\n\n")
		return
	}
	b.WriteString("\n**Mirror check failed**: the calls sent statements the pgbench scripts do not run, " +
		"so the ratios compare billingd with other SQL:\n\n")
	for _, m := range missing {
		fmt.Fprintf(b, "- `%s`\n", m)
	}
	b.WriteString("\n")
}

// target is one of issue 15's goals with what this run measured.
type target struct {
	goal     string
	measured string
	met      bool
}

func writeTargets(b *strings.Builder, opts options, res results) {
	b.WriteString("### Targets (issue 29)\n\n| target | measured | |\n|---|---|---|\n")
	for _, t := range targets(opts, res) {
		verdict := "met"
		if !t.met {
			verdict = "**missed**"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.goal, t.measured, verdict)
	}
	b.WriteString("\n")
}

// Issue 29's targets, at 16 clients unless they say otherwise.
const (
	targetClients    = 16
	targetManyClient = 64   // no collapse: throughput here at least targetClients'
	targetPGCPU      = 0.15 // PostgreSQL CPU per handshake over the mirror's, at most
	targetP99OverP50 = 4.0  // handshake p99 over its p50, at most
	targetOldRowsP50 = 0.15 // p50 change with the most old rows, below
)

var (
	targetRatio = map[workload]float64{propose: 0.55, handshake: 0.50} // of the pgbench mirror's throughput
	// By the call's first word. The second call's three: its lock (with
	// the rate limit's count), its recovery point (issue 19: a crash
	// forgets nothing) and its record.
	targetTrips = map[string]int{"propose": 2, "confirm": 3}
)

// targets judges the medians of the rounds; the ratio's says its round
// pairs' range too, so a target met by the median but not by every round
// shows.
func targets(opts options, res results) []target {
	var ts []target
	for _, w := range []workload{propose, handshake} {
		if r, ok := findRow(res.throughput, w, targetClients); ok {
			ts = append(ts, rowTargets(res.throughput, r, explanationsText(res))...)
		}
	}
	ts = append(ts, dataSizeTargets(res.dataSizes)...)
	for _, t := range res.trips {
		limit := targetTrips[strings.Fields(t.call)[0]]
		ts = append(ts, target{fmt.Sprintf("≤ %d round trips, %s", limit, t.call), fmt.Sprintf("%d (max %d)", t.median, t.max), t.max <= limit})
	}
	ts = append(ts, target{fmt.Sprintf("peak RSS ≤ 100 MiB (runs up to %d clients)", maxClients(opts)),
		fmt.Sprintf("%.1f MiB", mib(res.peakRSSKiB)), mib(res.peakRSSKiB) <= 100})
	errs := 0
	for _, r := range res.throughput {
		errs += r.service.errors() + r.pgbench.errors()
	}
	for _, d := range res.dataSizes {
		errs += d.propose.service.errors() + d.handshake.service.errors() + d.propose.pgbench.errors() + d.handshake.pgbench.errors()
	}
	errs += res.idle.service.errors() + res.idle.pgbench.errors() + res.pinnedRow.service.errors() + res.pinnedRow.pgbench.errors()
	return append(ts, target{"zero errors", fmt.Sprint(errs), errs == 0})
}

// rowTargets are the targets of r, a row at targetClients. beside is what
// the rows that explain PostgreSQL's CPU measured (explain.go), named
// beside its figure but never judged: the verdict is against the mirror
// back to back, unpinned.
func rowTargets(rows []comparison, r comparison, beside string) []target {
	w, ratio := r.workload, r.ratio()
	ts := []target{{fmt.Sprintf("%s ≥ %s of pgbench at %d clients", w, pct(targetRatio[w]), targetClients),
		fmt.Sprintf("%s (rounds %s–%s; bound with a CPU-free billingd: %s)", pct(ratio.median), pct(ratio.min), pct(ratio.max), pct(cpuBound(r))),
		ratio.median >= targetRatio[w]}}
	if w != handshake {
		return ts
	}
	svcPG, mirrorPG := r.service.cpu(cpuPostgres).median, r.pgbench.cpu(cpuPostgres).median
	p50, p99 := r.service.p50().median, r.service.p99().median
	pgCPU := fmt.Sprintf("%.0f µs vs %.0f µs (%s)", svcPG, mirrorPG, change(svcPG, mirrorPG))
	if beside != "" {
		pgCPU += "; " + beside
	}
	ts = append(ts,
		target{fmt.Sprintf("handshake: PostgreSQL CPU per call within %s of the mirror's", pct(targetPGCPU)),
			pgCPU, svcPG/mirrorPG-1 <= targetPGCPU},
		target{fmt.Sprintf("handshake p99 ≤ %.0f × its p50 at %d clients", targetP99OverP50, targetClients),
			fmt.Sprintf("%.2f ms / %.2f ms (%.1f ×)", p99, p50, p99/p50), p99 <= targetP99OverP50*p50})
	if many, ok := findRow(rows, w, targetManyClient); ok {
		// Only billingd's: the mirror runs no more connections at 64
		// clients than at 16 (options.mainPool), because it collapsed.
		manySvc, svc := many.service.rate().median, r.service.rate().median
		ts = append(ts,
			target{fmt.Sprintf("no collapse: billingd's handshakes/s at %d clients ≥ at %d", targetManyClient, targetClients),
				fmt.Sprintf("%.0f vs %.0f", manySvc, svc), manySvc >= svc})
	}
	return ts
}

// dataSizeTargets compare the p50s with the most old rows and the fewest.
func dataSizeTargets(sizes []dataSize) []target {
	n := len(sizes)
	if n < 2 {
		return nil
	}
	var ts []target
	first, last := sizes[0], sizes[n-1]
	for _, pair := range [][2]comparison{{first.propose, last.propose}, {first.handshake, last.handshake}} {
		before, after := pair[0].service.p50().median, pair[1].service.p50().median
		ts = append(ts, target{
			fmt.Sprintf("%s p50 with %s old rows within %s of %s", pair[0].workload, count(last.oldRows), pct(targetOldRowsP50), count(first.oldRows)),
			fmt.Sprintf("%.2f ms → %.2f ms (%s)", before, after, change(after, before)),
			after/before-1 < targetOldRowsP50})
	}
	return ts
}

func findRow(rows []comparison, w workload, clients int) (comparison, bool) {
	for _, r := range rows {
		if r.workload == w && r.clients == clients {
			return r, true
		}
	}
	return comparison{}, false
}

// updateDoc replaces the text between the bench markers of the page at
// path. The results' sections (###) sit under the page's "## " heading of
// the markers, as in the results file.
func updateDoc(path, body string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(data), docBegin)
	_, after, ok2 := strings.Cut(rest, docEnd)
	if !ok1 || !ok2 {
		return errors.New(path + ": no " + docBegin + " … " + docEnd + " markers to write the results between")
	}
	return os.WriteFile(path, []byte(before+docBegin+"\n\n"+body+docEnd+after), 0o644)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func msText(d time.Duration) string { return fmt.Sprintf("%.2f ms", ms(d)) }

// change is the relative change from base to v, signed.
func change(v, base float64) string {
	if base == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.0f%%", 100*(v/base-1))
}

// count writes row counts the way people say them.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func writeLatency(b *strings.Builder, opts options, rows []latencyRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("### At Stripe's pace\n\n")
	fmt.Fprintf(b, "The same billingd and stand-in, slowed to Stripe's latency by stripepaytest's Pacer: %s. "+
		"Full handshakes back to back; a second call answered 503 upstream_unavailable is sent again with the same token "+
		"after its Retry-After (shed). Each row: %s measured after %s of warm-up. Limit: clients ÷ (preview + update, "+
		"plus the subscription reads a second call makes), the most handshakes that latency allows; in brackets with the "+
		"tail's mean instead of the typical update. Latency in ms; connections: the most billingd held at once "+
		"(in a statement or transaction; of them on the executions pool) and had open, from pg_stat_activity.\n\n",
		paceOf(opts), opts.latencyDuration, opts.latencyWarmup)
	if opts.latencyOneOrg > 0 {
		fmt.Fprintf(b, "The row \"one org each\" is issue 39's shape: every update %s (no tail), the preview %s, "+
			"subscription reads at loopback speed, each client on one org of its own.\n\n", opts.latencyUpdate, opts.latencyPreview)
	}
	b.WriteString("| clients | handshakes/s | limit | share | first p50 | first p99 | second p50 | second p99 | longest call | shed | errors (500s) | connections held (executions) / open | billingd RSS MiB |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		clients := fmt.Sprint(r.clients)
		if r.oneOrg {
			clients += ", one org each (issue 39)"
		}
		fmt.Fprintf(b, "| %s | %.1f | %.1f (%.1f) | %s | %.1f | %.1f | %.1f | %.1f | %.0f | %d | %d (%d) | %d (%d) / %d | %.1f |\n",
			clients, r.rate, r.limit, r.limitMean, pct(r.share()), ms(r.first.p50), ms(r.first.p99),
			ms(r.second.p50), ms(r.second.p99), ms(r.longest), r.shed, r.errors, r.internal,
			r.conns.held, r.conns.heldExecutions, r.conns.open, mib(r.rssKiB))
	}
	b.WriteString("\n")
	for _, r := range rows {
		for _, msg := range r.firstErrs {
			fmt.Fprintf(b, "- %d clients, error: `%s`\n", r.clients, msg)
		}
	}
}

// Issue 20's targets, at Stripe's pace.
const (
	paceTargetClients = 32
	paceTargetShare   = 0.90                  // of the latency limit
	paceTargetSlack   = 50 * time.Millisecond // first-call p99 over the preview's latency
	paceStripeTimeout = 20 * time.Second      // billingd's default STRIPE_TIMEOUT, which the bench keeps
	paceOverload      = 128                   // clients beyond what one replica holds open
	// Issue 39's, for its row (one org per client, no tail, reads at
	// loopback speed).
	oneOrgTargetShare = 0.85
	oneOrgTargetSlack = 150 * time.Millisecond
)

func writeLatencyTargets(b *strings.Builder, opts options, rows []latencyRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Targets at Stripe's pace (issues 20, 29 and 39)\n\n| target | measured | |\n|---|---|---|\n")
	for _, t := range latencyTargets(opts, rows) {
		verdict := "met"
		if !t.met {
			verdict = "**missed**"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.goal, t.measured, verdict)
	}
	b.WriteString("\n")
}

func latencyTargets(opts options, rows []latencyRow) []target {
	var ts []target
	for _, r := range rows {
		if r.oneOrg {
			ts = append(ts,
				target{fmt.Sprintf("≥ %s of the latency limit at %d clients, one org each", pct(oneOrgTargetShare), r.clients),
					fmt.Sprintf("%.1f of %.1f handshakes/s: %s", r.rate, r.limit, pct(r.share())), r.share() >= oneOrgTargetShare},
				target{fmt.Sprintf("first-call p99 ≤ preview + %s at %d clients, one org each", oneOrgTargetSlack, r.clients),
					fmt.Sprintf("%s (preview %s)", msText(r.first.p99), opts.latencyPreview), r.first.p99 <= opts.latencyPreview+oneOrgTargetSlack})
			continue
		}
		switch r.clients {
		case paceTargetClients:
			ts = append(ts,
				target{fmt.Sprintf("≥ %s of the latency limit at %d clients", pct(paceTargetShare), r.clients),
					fmt.Sprintf("%.1f of %.1f handshakes/s: %s (%s of %.1f, the limit with the tail's mean)",
						r.rate, r.limit, pct(r.share()), pct(r.rate/r.limitMean), r.limitMean), r.share() >= paceTargetShare},
				target{fmt.Sprintf("first-call p99 ≤ preview + %s at %d clients", paceTargetSlack, r.clients),
					fmt.Sprintf("%s (preview %s)", msText(r.first.p99), opts.latencyPreview), r.first.p99 <= opts.latencyPreview+paceTargetSlack})
		case paceOverload:
			ts = append(ts,
				target{fmt.Sprintf("no 500s at %d clients", r.clients), fmt.Sprint(r.internal), r.internal == 0},
				target{fmt.Sprintf("no call longer than STRIPE_TIMEOUT (%s) at %d clients", paceStripeTimeout, r.clients),
					fmt.Sprintf("longest %s; %d second calls shed and sent again", r.longest.Round(time.Millisecond), r.shed),
					r.longest <= paceStripeTimeout},
				target{fmt.Sprintf("bounded memory at %d clients (RSS ≤ 100 MiB)", r.clients), fmt.Sprintf("%.1f MiB", mib(r.rssKiB)),
					mib(r.rssKiB) <= 100})
		}
	}
	errs := 0
	for _, r := range rows {
		errs += r.errors
	}
	return append(ts, target{"no errors at Stripe's pace (shed calls are answers, not errors)", fmt.Sprint(errs), errs == 0})
}

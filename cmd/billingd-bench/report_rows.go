package main

import (
	"fmt"
	"strings"
	"time"
)

// The tables of the rows that set billingd against its mirror. Every figure
// is the median of the row's rounds, with its spread in brackets: (max −
// min) / median, so "(8%)" means the rounds lay within 8% of the median's
// size of each other (rounds.go says why there are rounds).

// withSpread formats a median and, when the rounds differed, its spread.
func withSpread(format string, s spread) string {
	text := fmt.Sprintf(format, s.median)
	if s.max == s.min {
		return text
	}
	return text + " (" + pct(s.relative()) + ")"
}

// ratioText is a row's ratio of medians with the range of its round pairs'
// ratios.
func ratioText(c comparison) string {
	r := c.ratio()
	if r.min == r.max {
		return pct(r.median)
	}
	return fmt.Sprintf("%s (%.0f–%s)", pct(r.median), 100*r.min, pct(r.max))
}

// roundsText explains the rounds in the report's setup line.
func roundsText(opts options) string {
	return fmt.Sprintf("billingd and its pgbench mirror run alternately (billingd, mirror, billingd, …), "+
		"%d rounds each; every run is %s measured after %s of warm-up (pgbench's runs last whole seconds, so up to "+
		"a second longer, and their window starts at its first transaction), from a settled database (VACUUM, CHECKPOINT)",
		opts.rounds, opts.duration, opts.warmup)
}

// clientsCell is a row's clients, and the mirror's connections where it
// ran fewer (mirrorConnections): "64 (mirror: 16)".
func clientsCell(r comparison) string {
	if r.mirror > 0 && r.mirror < r.clients {
		return fmt.Sprintf("%d (mirror: %d)", r.clients, r.mirror)
	}
	return fmt.Sprint(r.clients)
}

func writeThroughput(b *strings.Builder, rows []comparison) {
	b.WriteString("### Throughput and latency\n\n")
	b.WriteString("Latency in ms; a handshake is both calls. Each figure is the median of the row's rounds, " +
		"in brackets its spread, (max − min) / median; max is the longest operation of any round, errors those of all rounds. " +
		"Ratio: billingd's median throughput over pgbench's, in brackets the lowest and highest ratio of a round's pair " +
		"(billingd's run and the mirror's right after it). CPU per operation, with its spreads, is under \"Where the CPU goes\" below.\n\n")
	b.WriteString("| workload | clients | billingd ops/s | p50 | p99 | max | errors | pgbench tps | p50 | p99 | max | ratio | billingd RSS MiB |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		s, p := r.service, r.pgbench
		errs := fmt.Sprint(s.errors() + p.errors())
		if s.shed() > 0 { // second calls beyond CONFIRM_CONCURRENCY, sent again after Retry-After
			errs += fmt.Sprintf(" (%d shed)", s.shed())
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %.2f | %s | %.1f |\n",
			r.workload, clientsCell(r), withSpread("%.0f", s.rate()), withSpread("%.2f", s.p50()), withSpread("%.2f", s.p99()),
			ms(s.longest()), errs, withSpread("%.0f", p.rate()), withSpread("%.2f", p.p50()), withSpread("%.2f", p.p99()),
			ms(p.longest()), ratioText(r), mib(r.rssKiB))
	}
	b.WriteString("\n")
}

// writeRounds lists every round's throughput, so a reader sees what the
// medians and spreads were made of.
func writeRounds(b *strings.Builder, rows []comparison) {
	b.WriteString("### Rounds\n\nOperations per second of each round, in the order they ran " +
		"(billingd's round 1, the mirror's round 1, billingd's round 2, …), each round pair's ratio, and the row's wall time: " +
		"all its runs with the settles and syncs between them.\n\n")
	b.WriteString("| workload | clients | billingd ops/s | pgbench tps | ratio | the row's time |\n|---|--:|---|---|---|--:|\n")
	for _, r := range rows {
		var svc, pg, ratios []string
		for i := range max(len(r.service), len(r.pgbench)) {
			if i < len(r.service) {
				svc = append(svc, fmt.Sprintf("%.0f", r.service[i].rate))
			}
			if i < len(r.pgbench) {
				pg = append(pg, fmt.Sprintf("%.0f", r.pgbench[i].rate))
			}
			if i < len(r.service) && i < len(r.pgbench) && r.pgbench[i].rate > 0 {
				ratios = append(ratios, pct(r.service[i].rate/r.pgbench[i].rate))
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", r.workload, clientsCell(r),
			strings.Join(svc, " · "), strings.Join(pg, " · "), strings.Join(ratios, " · "), r.elapsed.Round(time.Second))
	}
	b.WriteString("\n")
}

// CPU per operation, part by part, for the CPU table.
var (
	cpuBillingd = func(c cpuPerOp) float64 { return c.billingd }
	cpuBench    = func(c cpuPerOp) float64 { return c.bench }
	cpuPostgres = func(c cpuPerOp) float64 { return c.postgres }
	cpuPgbench  = func(c cpuPerOp) float64 { return c.pgbench }
	cpuTotal    = func(c cpuPerOp) float64 { return c.total() }
	cpuNotMine  = func(c cpuPerOp) float64 { return c.bench + c.postgres } // all but billingd's own

	cpuKernel      = func(c cpuPerOp) float64 { return c.billingdKernel }
	cpuReadsWrites = func(c cpuPerOp) float64 { return c.billingdReadsWrites }
	cpuAllocKiB    = func(c cpuPerOp) float64 { return c.billingdAllocKiB }
)

// writeCPUBudget explains the ratios: when every part shares the cores,
// throughput follows CPU per operation, so a ratio is about the CPU each
// side spends per operation. The bound assumes billingd itself cost nothing:
// the load generator and the PostgreSQL work would remain.
func writeCPUBudget(b *strings.Builder, rows []comparison) {
	b.WriteString("### Where the CPU goes\n\n")
	b.WriteString("The machine's cores run PostgreSQL, billingd and the load generator at once, so a run's throughput " +
		"follows what one operation costs in CPU. CPU µs/op: medians of the rounds, spread in brackets; billingd's side " +
		"is billingd + the bench process (load generator, Stripe stand-in, issuer) + its PostgreSQL backends, the mirror's " +
		"its PostgreSQL backends + pgbench. Predicted ratio: the mirror's side over billingd's side. " +
		"Bound: the ratio if billingd itself used no CPU at all. With 1 or 4 clients the cores are not saturated " +
		"and latency, not CPU, limits both sides, so the prediction holds from 16 clients up.\n\n")
	b.WriteString("| workload | clients | billingd | bench | PostgreSQL | billingd side | mirror's PostgreSQL | pgbench | mirror side | predicted ratio | measured ratio | bound |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		s, p := r.service, r.pgbench
		if s.cpu(cpuTotal).median == 0 || p.cpu(cpuTotal).median == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.workload, clientsCell(r),
			withSpread("%.0f", s.cpu(cpuBillingd)), withSpread("%.0f", s.cpu(cpuBench)), withSpread("%.0f", s.cpu(cpuPostgres)),
			withSpread("%.0f", s.cpu(cpuTotal)), withSpread("%.0f", p.cpu(cpuPostgres)), withSpread("%.0f", p.cpu(cpuPgbench)),
			withSpread("%.0f", p.cpu(cpuTotal)), pct(p.cpu(cpuTotal).median/s.cpu(cpuTotal).median), pct(r.ratio().median), pct(cpuBound(r)))
	}
	b.WriteString("\n")
}

// writeOwnCPU splits billingd's own CPU per operation into the kernel's
// part and counts its reads and writes: on a machine where a system call
// is expensive, much of what billingd spends is the kernel carrying its
// messages (to PostgreSQL, Stripe, the client, the log), which only fewer
// messages make cheaper. Its allocation per operation is the other count:
// what malloc and the garbage collector cost follows it.
func writeOwnCPU(b *strings.Builder, rows []comparison, perSyscall time.Duration) {
	b.WriteString("### billingd's own CPU\n\n")
	fmt.Fprintf(b, "billingd's CPU per operation (as above), the part of it in the kernel (stime), and its read and write "+
		"system calls per operation (/proc/<pid>/io: read, write, readv, writev, which Go's sockets and files use, a read "+
		"that found nothing to read included; epoll, futex and the Go scheduler's sleeps not counted), priced at what the "+
		"cheapest system call costs on this machine (%.2f µs, getppid): a low floor, since a write over loopback also "+
		"delivers to its reader and wakes it. Then what billingd's Go runtime allocated on the heap per operation "+
		"(its /metrics: go_memstats_alloc_bytes_total), which its garbage collector later pays for: like the reads "+
		"and writes, a count that follows the code, not the machine's pace. "+
		"Medians of the rounds, spread in brackets.\n\n", us(perSyscall))
	b.WriteString("| workload | clients | billingd µs/op | in the kernel | reads and writes | × a system call's cost, µs | KiB allocated/op |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		s := r.service
		if s.cpu(cpuBillingd).median == 0 {
			continue
		}
		calls, priced := "n/a", "n/a" // the kernel keeps no /proc/<pid>/io
		if c := s.cpu(cpuReadsWrites); c.min >= 0 {
			calls, priced = withSpread("%.1f", c), fmt.Sprintf("%.0f", c.median*us(perSyscall))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.workload, clientsCell(r),
			withSpread("%.0f", s.cpu(cpuBillingd)), withSpread("%.0f", s.cpu(cpuKernel)), calls, priced,
			withSpread("%.1f", s.cpu(cpuAllocKiB)))
	}
	b.WriteString("\n")
}

// cpuBound is the ratio a billingd using no CPU would reach, from the
// medians.
func cpuBound(r comparison) float64 {
	rest := r.service.cpu(cpuNotMine).median
	if rest == 0 {
		return 0
	}
	return r.pgbench.cpu(cpuTotal).median / rest
}

// writeCeiling puts the disk's commit ceiling beside the handshake rows:
// how many commits a second the disk allows, and how many a call makes.
func writeCeiling(b *strings.Builder, c commitCeiling, trips []roundTrips) {
	b.WriteString("**The disk's commit ceiling.** ")
	if c.perSecond == 0 {
		fmt.Fprintf(b, "pg_test_fsync: %s.\n\n", c.missing)
		return
	}
	fmt.Fprintf(b, "pg_test_fsync (`-s %d`, the server's wal_sync_method `%s`, one 8kB write, on the data directory's filesystem) "+
		"measured **%.0f flushes per second** at the start of the run. With synchronous_commit on, a commit that wrote or locked rows "+
		"waits for one.", c.seconds, c.method, c.perSecond)
	first, second := commitsOf(trips, "propose"), commitsOf(trips, "confirm")
	if first > 0 && second > 0 {
		fmt.Fprintf(b, " A first call makes %d such commit(s), a handshake %d (the round-trip tracer below counts them): "+
			"one client alone can do at most **%.0f first calls or %.0f handshakes per second**. Concurrent clients share "+
			"flushes (group commit), so more clients can go past that; billingd and the mirror face the same disk.",
			first, first+second, c.perSecond/float64(first), c.perSecond/float64(first+second))
	}
	b.WriteString("\n\n")
}

// commitsOf is the flushing commits of the call whose name starts with
// call ("propose (first call)"), 0 when it was not counted.
func commitsOf(trips []roundTrips, call string) int {
	for _, t := range trips {
		if strings.Fields(t.call)[0] == call {
			return t.commits
		}
	}
	return 0
}

func writeDataSizes(b *strings.Builder, opts options, rows []dataSize) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "### Old confirmation rows (%d clients)\n\n", opts.dataClients)
	b.WriteString("Finished confirmations from the last 60 days, spread over every org and principal, bulk-inserted " +
		"on top of the rows the earlier runs made; changes against the first row. The pgbench mirror runs at each size " +
		"too, alternately with billingd: its numbers move with whatever else the machine does, and billingd's ratio to it shows what the rows " +
		"themselves change. Medians of the rounds; ops/s with its spread, ratios with their round pairs' range.\n\n")
	b.WriteString("| old rows | rows in table | propose ops/s | p50 ms | p50 change | ops/s change | ratio | handshake ops/s | p50 ms | p50 change | ops/s change | ratio | pgbench propose / handshake tps | errors |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	base := rows[0]
	for _, r := range rows {
		p, h := r.propose.service, r.handshake.service
		bp, bh := base.propose.service, base.handshake.service
		fmt.Fprintf(b, "| %s | %d | %s | %.2f | %s | %s | %s | %s | %.2f | %s | %s | %s | %.0f / %.0f | %d |\n",
			count(r.oldRows), r.rows, withSpread("%.0f", p.rate()), p.p50().median, change(p.p50().median, bp.p50().median),
			change(p.rate().median, bp.rate().median), ratioText(r.propose),
			withSpread("%.0f", h.rate()), h.p50().median, change(h.p50().median, bh.p50().median),
			change(h.rate().median, bh.rate().median), ratioText(r.handshake),
			r.propose.pgbench.rate().median, r.handshake.pgbench.rate().median,
			p.errors()+h.errors()+r.propose.pgbench.errors()+r.handshake.pgbench.errors())
	}
	b.WriteString("\n")
}

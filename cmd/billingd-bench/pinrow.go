package main

import (
	"context"
	"fmt"
	"strings"
)

// The target row with PostgreSQL on cores of its own.
//
// On two shared cores every microsecond billingd and the load generator
// run is interleaved with PostgreSQL, and billingd's backends have spent
// 12–29 % more CPU per handshake at 16 clients than the mirror's on the same statements;
// with -pin (PostgreSQL on one core, everything else on the other) quick
// runs put them within 8–14 % (docs/performance.md, 28 and 29 November).
// So every run measures the target row once more pinned, as on a machine
// where the database runs apart: the cost of billingd's statements without
// the cost of sharing cores. No target is judged by it.

// runPinnedRow runs the target row (handshakes at targetClients) pinned
// (pin.go), alternately with the mirror as every row, and gives every CPU
// back after it. It runs nothing, and says why, when the run has no such
// row, is pinned throughout (-pin), or cannot pin (a server on another
// machine, or no right to change its processes' affinity).
func (e *env) runPinnedRow(ctx context.Context, rows []comparison) (comparison, error) {
	if _, ok := findRow(rows, handshake, targetClients); !ok || e.opts.pin {
		return comparison{}, nil
	}
	if err := e.pinCPUs(ctx); err != nil {
		e.unpinCPUs()
		e.log.Printf("no pinned row: %v", err)
		return comparison{}, nil
	}
	defer e.unpinCPUs()
	row, err := e.compare(ctx, handshake, targetClients, 0)
	row.pinned = e.pinned.String()
	return row, err
}

// pinnedRowText names the pinned row's PostgreSQL CPU per handshake beside
// the target's ("" when the run has no such row).
func pinnedRowText(pinned comparison) string {
	svc, mirror := pinned.service.cpu(cpuPostgres).median, pinned.pgbench.cpu(cpuPostgres).median
	if pinned.pinned == "" || mirror == 0 {
		return ""
	}
	return fmt.Sprintf("not judged, other rounds: %.0f µs vs %.0f µs (%s) with PostgreSQL on cores of its own (its table)",
		svc, mirror, change(svc, mirror))
}

func writePinnedRow(b *strings.Builder, pinned comparison) {
	s, p := pinned.service, pinned.pgbench
	if pinned.pinned == "" || len(s) == 0 || len(p) == 0 {
		return
	}
	fmt.Fprintf(b, "### PostgreSQL's CPU on cores of its own\n\n"+
		"Unpinned, PostgreSQL shares the cores with billingd and the load generator on one side and with pgbench on the other. "+
		"So the %d-client handshake row ran once more, in rounds of its own, pinned with taskset (%s), "+
		"as on a machine where the database runs apart. No target is judged by it, and its ratio is not the mirror's ceiling: "+
		"each side has half the cores. Medians of %d rounds each, alternately, spread in brackets.\n\n", pinned.clients, pinned.pinned, len(s))
	b.WriteString("| per handshake | billingd | the mirror | billingd against it |\n|---|--:|--:|--:|\n")
	fmt.Fprintf(b, "| PostgreSQL CPU, µs | %s | %s | %s |\n", withSpread("%.0f", s.cpu(cpuPostgres)), withSpread("%.0f", p.cpu(cpuPostgres)),
		change(s.cpu(cpuPostgres).median, p.cpu(cpuPostgres).median))
	fmt.Fprintf(b, "| handshakes per second | %s | %s | %s |\n", withSpread("%.0f", s.rate()), withSpread("%.0f", p.rate()), ratioText(pinned))
	fmt.Fprintf(b, "| errors | %s | %d | |\n\n", errorsText(s), p.errors())
}

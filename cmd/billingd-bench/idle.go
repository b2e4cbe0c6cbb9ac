package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// The mirror that idles as billingd does.
//
// billingd works between its round trips (HTTP, JSON, the Stripe request a
// second call sends inside its transaction), so its PostgreSQL backends
// idle between statements; pgbench sends the next at once. On the VMs we
// measured, the same statements cost a backend more CPU after an idle gap:
// against a mirror given 0.7 ms gaps, billingd's backends spent −1 to +7 %
// of the mirror's CPU per handshake, against +12 to +28 % back to back
// (docs/performance.md, 29 November). So the target row is run once more
// against a mirror that waits, after each round trip, as long as billingd's
// backends idle on average: how close billingd's backends come to what its
// statements cost at its pace. The published ratios stay against the
// mirror back to back, the database's ceiling.

// idleGap is how long billingd's backends idle per round trip, from the
// 1-client handshake row, where nothing queues: what a handshake takes
// billingd beyond the mirror (p50s), spread over a handshake's round trips
// (both calls', as the tracer counted them), to the nearest 10 µs. 0 when
// the run has no such row or billingd was not slower.
func idleGap(rows []comparison, trips []roundTrips) time.Duration {
	row, ok := findRow(rows, handshake, 1)
	n := 0
	for _, t := range trips {
		n += t.median
	}
	if !ok || n == 0 {
		return 0
	}
	beyond := row.service.p50().median - row.pgbench.p50().median // ms
	if beyond <= 0 {
		return 0
	}
	return time.Duration(math.Round(beyond*1000/float64(n)/10)) * 10 * time.Microsecond
}

// runIdleMirror runs the target row (handshakes at targetClients) against
// the mirror idling idleGap per round trip, alternately with billingd as
// every row. It runs nothing when the run has no such rows, or when every
// row's mirror already waits (-mirror-gap).
func (e *env) runIdleMirror(ctx context.Context, rows []comparison, trips []roundTrips) (comparison, error) {
	gap := idleGap(rows, trips)
	if _, ok := findRow(rows, handshake, targetClients); !ok || gap == 0 || e.opts.mirrorGap > 0 {
		return comparison{}, nil
	}
	e.log.Printf("the mirror idling %s per round trip, as billingd's backends do", gap)
	return e.compare(ctx, handshake, targetClients, gap)
}

// idleMirrorText is the PostgreSQL CPU per handshake of billingd's
// backends against the idling mirror's ("" when the run has no such row).
func idleMirrorText(idle comparison) string {
	svc, mirror := idle.service.cpu(cpuPostgres).median, idle.pgbench.cpu(cpuPostgres).median
	if idle.gap == 0 || mirror == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f µs vs %.0f µs (%s) against the mirror idling %s per round trip as billingd's backends do",
		svc, mirror, change(svc, mirror), idle.gap)
}

func writeIdleMirror(b *strings.Builder, idle comparison) {
	if idle.gap == 0 {
		return
	}
	s, p := idle.service, idle.pgbench
	fmt.Fprintf(b, "### PostgreSQL's CPU when the mirror idles as billingd does\n\n"+
		"billingd works between its round trips (HTTP, JSON, the Stripe requests), so its backends idle between statements, "+
		"while pgbench sends the next at once; the same statements cost a backend more CPU after an idle gap. "+
		"So the %d-client handshake row ran once more, against a mirror that waits **%s after each round trip** "+
		"(pgbench's `\\sleep`): the 1-client handshake row's p50 beyond the mirror's, over a handshake's round trips. "+
		"This mirror is no ceiling; the ratios and targets above are against the mirror back to back. "+
		"Medians of %d rounds each, alternately, spread in brackets.\n\n", idle.clients, idle.gap, len(s))
	b.WriteString("| per handshake | billingd | the mirror, idling | billingd against it |\n|---|--:|--:|--:|\n")
	fmt.Fprintf(b, "| PostgreSQL CPU, µs | %s | %s | %s |\n", withSpread("%.0f", s.cpu(cpuPostgres)), withSpread("%.0f", p.cpu(cpuPostgres)),
		change(s.cpu(cpuPostgres).median, p.cpu(cpuPostgres).median))
	fmt.Fprintf(b, "| handshakes per second | %s | %s | %s |\n\n", withSpread("%.0f", s.rate()), withSpread("%.0f", p.rate()), ratioText(idle))
}

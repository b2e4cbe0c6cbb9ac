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
// billingd works between its round trips (HTTP, JSON, the Stripe requests a
// second call sends inside its transactions), so its PostgreSQL backends
// idle between statements; pgbench sends the next at once. On the VM of 29
// November, two quick runs against a mirror given 0.7 ms gaps put billingd's
// backends at −1 and +4 % of the mirror's CPU per handshake at 16 clients,
// against +12 to +28 % in every run back to back that day
// (docs/performance.md): an idle gap seems to make the same statements
// dearer. So the target row is run once more against a mirror that waits
// after each round trip, by an estimate of how long billingd's backends
// idle. It is a comparison, not a ceiling, and no target is judged by it.

// idleGap estimates how long billingd's backends idle per round trip, from
// the 1-client handshake row, where nothing queues: what a handshake takes
// billingd beyond the mirror (p50s), less what its backends spent beyond
// the mirror's (CPU per handshake: time in a statement, not idle), spread
// over the mirror's round trips (roundTrips: the \sleeps withGaps puts in
// its script), to the nearest 10 µs. 0 when the run has no such row or
// billingd's backends did not idle longer than the mirror's.
//
// One gap per round trip is a simplification: billingd's idle time is
// lumpy (the Stripe requests sit between its third and fifth round trips),
// and at 16 clients it also waits for a CPU, which the 1-client row does
// not see.
func idleGap(rows []comparison, roundTrips int) time.Duration {
	row, ok := findRow(rows, handshake, 1)
	if !ok || roundTrips == 0 {
		return 0
	}
	beyond := row.service.p50().median - row.pgbench.p50().median // ms
	if busier := row.service.cpu(cpuPostgres).median - row.pgbench.cpu(cpuPostgres).median; busier > 0 {
		beyond -= busier / 1000 // µs → ms
	}
	if beyond <= 0 {
		return 0
	}
	return time.Duration(math.Round(beyond*1000/float64(roundTrips)/10)) * 10 * time.Microsecond
}

// mirrorRoundTrips is how many round trips w's mirror script makes: where
// withGaps makes it wait.
func mirrorRoundTrips(w workload) (int, error) {
	body, err := scripts.ReadFile("scripts/" + string(w) + ".sql")
	if err != nil {
		return 0, err
	}
	return strings.Count(string(withGaps(body, time.Microsecond)), `\sleep`), nil
}

// runIdleMirror runs the target row (handshakes at targetClients) against
// the mirror idling idleGap per round trip, alternately with billingd as
// every row. It runs nothing, and says why, when the run has no such rows
// or every row's mirror already waits (-mirror-gap).
func (e *env) runIdleMirror(ctx context.Context, rows []comparison) (comparison, error) {
	if e.opts.mirrorGap > 0 {
		return comparison{}, nil
	}
	trips, err := mirrorRoundTrips(handshake)
	if err != nil {
		return comparison{}, err
	}
	gap := idleGap(rows, trips)
	if _, ok := findRow(rows, handshake, targetClients); !ok || gap == 0 {
		e.log.Printf("no row against an idling mirror: it needs the handshake rows at 1 and %d clients, and billingd's backends idling longer than the mirror's (gap %s)", targetClients, gap)
		return comparison{}, nil
	}
	e.log.Printf("the %d-client handshake row again, against the mirror idling %s after each of its %d round trips", targetClients, gap, trips)
	return e.compare(ctx, handshake, targetClients, gap)
}

// idleMirrorText names the idling mirror's PostgreSQL CPU per handshake
// beside the target's ("" when the run has no such row).
func idleMirrorText(idle comparison) string {
	svc, mirror := idle.service.cpu(cpuPostgres).median, idle.pgbench.cpu(cpuPostgres).median
	if idle.gap == 0 || mirror == 0 {
		return ""
	}
	return fmt.Sprintf("not judged, other rounds: %.0f µs vs %.0f µs (%s) against the mirror idling %s per round trip (its table)",
		svc, mirror, change(svc, mirror), idle.gap)
}

func writeIdleMirror(b *strings.Builder, idle comparison) {
	s, p := idle.service, idle.pgbench
	if idle.gap == 0 || len(s) == 0 || len(p) == 0 {
		return
	}
	fmt.Fprintf(b, "### PostgreSQL's CPU against a mirror that idles\n\n"+
		"billingd works between its round trips (HTTP, JSON, the Stripe requests), so its backends idle between statements, "+
		"while pgbench sends the next at once, and an idle gap may make the same statements dearer. "+
		"So the %d-client handshake row ran once more, in rounds of its own, against a mirror that waits **%s after each round trip** "+
		"(pgbench's `\\sleep`): an estimate of how long billingd's backends idle, from the 1-client handshake row "+
		"(its p50 beyond the mirror's, less its backends' CPU beyond the mirror's, over the mirror's round trips). "+
		"This mirror is no ceiling, and no target is judged by it: the ratios and targets are against the mirror back to back. "+
		"Medians of %d rounds each, alternately, spread in brackets.\n\n", idle.clients, idle.gap, len(s))
	b.WriteString("| per handshake | billingd | the mirror, idling | billingd against it |\n|---|--:|--:|--:|\n")
	fmt.Fprintf(b, "| PostgreSQL CPU, µs | %s | %s | %s |\n", withSpread("%.0f", s.cpu(cpuPostgres)), withSpread("%.0f", p.cpu(cpuPostgres)),
		change(s.cpu(cpuPostgres).median, p.cpu(cpuPostgres).median))
	fmt.Fprintf(b, "| handshakes per second | %s | %s | %s |\n", withSpread("%.0f", s.rate()), withSpread("%.0f", p.rate()), ratioText(idle))
	fmt.Fprintf(b, "| errors | %s | %d | |\n\n", errorsText(s), p.errors())
}

// errorsText is a side's errors, and the calls it shed among them.
func errorsText(s side) string {
	if s.shed() == 0 {
		return fmt.Sprint(s.errors())
	}
	return fmt.Sprintf("%d (%d shed)", s.errors(), s.shed())
}

package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// The target row again, to explain PostgreSQL's CPU.
//
// billingd's backends have spent 12–29 % more CPU per handshake than the
// mirror's at 16 clients on two-core machines, on the same statements
// reading the same pages (docs/performance.md, 28 and 29 November). Two
// readings have each been supported by quick runs, and neither is
// established:
//   - idle gaps: billingd works between its round trips (HTTP, JSON, the
//     Stripe requests), so its backends idle between statements while
//     pgbench sends the next at once, and an idle gap may make the next
//     statement dearer;
//   - shared cores: on two cores every microsecond billingd and the load
//     generator run is interleaved with PostgreSQL; with -pin (PostgreSQL
//     on CPUs apart from everything else) billingd's backends spent 11 and
//     14 % more than the mirror's where they spent 25–29 % unpinned.
//
// So every full run measures the 16-client handshake row twice more, each
// alternately with its mirror as every row: against a mirror that idles
// (idleGap), and pinned. Neither is a ceiling, and no target is judged by
// them: the report names them beside the target's figure.

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

// explainable says why the target row cannot be run again as rows are
// ("" when it can): the run has no such row, or its mirror already waits.
func (e *env) explainable(rows []comparison) string {
	if _, ok := findRow(rows, handshake, targetClients); !ok {
		return fmt.Sprintf("the run has no handshake row at %d clients", targetClients)
	}
	if e.opts.mirrorGap > 0 {
		return "every row's mirror waits already (-mirror-gap)"
	}
	return ""
}

// runIdleMirror runs the target row against the mirror idling idleGap per
// round trip. It runs nothing, and says why, when it cannot.
func (e *env) runIdleMirror(ctx context.Context, rows []comparison) (comparison, error) {
	if why := e.explainable(rows); why != "" {
		e.log.Printf("no row against an idling mirror: %s", why)
		return comparison{}, nil
	}
	trips, err := mirrorRoundTrips(handshake)
	if err != nil {
		return comparison{}, err
	}
	gap := idleGap(rows, trips)
	if gap == 0 {
		e.log.Printf("no row against an idling mirror: it needs the 1-client handshake row, and billingd's backends idling longer than the mirror's")
		return comparison{}, nil
	}
	e.log.Printf("the %d-client handshake row again, against the mirror idling %s after each of its %d round trips", targetClients, gap, trips)
	return e.compare(ctx, handshake, targetClients, gap)
}

// runPinnedRow runs the target row pinned (pin.go) and gives every CPU
// back after it. It pins only a cluster of the bench's own: another
// server's processes are the operator's (-pin pins a whole run there). It
// runs nothing, and says why, when it cannot.
func (e *env) runPinnedRow(ctx context.Context, rows []comparison) (comparison, error) {
	why := e.explainable(rows)
	switch {
	case why != "":
	case e.opts.pin:
		why = "the whole run is pinned (-pin)"
	case !e.privateServer:
		why = "the server is not the bench's own (BENCH_DATABASE_URL); -pin pins a whole run on a local one"
	}
	if why != "" {
		e.log.Printf("no pinned row: %s", why)
		return comparison{}, nil
	}
	if err := e.pinCPUs(ctx); err != nil {
		e.unpinCPUs()
		e.log.Printf("no pinned row: %v", err)
		return comparison{}, nil
	}
	where := e.pinned.String()
	defer func() {
		e.unpinCPUs()
		e.log.Printf("unpinned")
	}()
	e.log.Printf("the %d-client handshake row again, pinned", targetClients)
	row, err := e.compare(ctx, handshake, targetClients, 0)
	row.pinned = where
	return row, err
}

// explanation is one of those rows, as the report shows it.
type explanation struct {
	row     comparison
	heading string // the table's
	how     string // how the row was run, after "against the mirror" / "with"
	mirror  string // the mirror's column
	intro   string
}

// explanations are the run's rows that ran.
func explanations(res results) []explanation {
	var ex []explanation
	if idle := res.idle; idle.gap > 0 {
		ex = append(ex, explanation{idle, "PostgreSQL's CPU against a mirror that idles",
			fmt.Sprintf("against the mirror idling %s per round trip", idle.gap), "the mirror, idling",
			fmt.Sprintf("billingd works between its round trips (HTTP, JSON, the Stripe requests), so its backends idle between statements, "+
				"while pgbench sends the next at once, and an idle gap may make the same statements dearer. "+
				"So the %d-client handshake row ran once more, in rounds of its own, against a mirror that waits **%s after each round trip** "+
				"(pgbench's `\\sleep`): an estimate of how long billingd's backends idle, from the 1-client handshake row "+
				"(its p50 beyond the mirror's, less its backends' CPU beyond the mirror's, over the mirror's round trips). "+
				"This mirror is no ceiling.", idle.clients, idle.gap)})
	}
	if pinned := res.pinnedRow; pinned.pinned != "" {
		ex = append(ex, explanation{pinned, "PostgreSQL's CPU on CPUs of its own",
			"with PostgreSQL on CPUs of its own", "the mirror",
			fmt.Sprintf("Unpinned, PostgreSQL shares the cores with billingd and the load generator on one side and with pgbench on the other. "+
				"So the %d-client handshake row ran once more, in rounds of its own, pinned with taskset (%s). "+
				"Its ratio is not the mirror's ceiling: each side has part of the CPUs.", pinned.clients, pinned.pinned)})
	}
	return ex
}

// text names the row's PostgreSQL CPU per handshake beside the target's.
func (x explanation) text() string {
	svc, mirror := x.row.service.cpu(cpuPostgres).median, x.row.pgbench.cpu(cpuPostgres).median
	return fmt.Sprintf("%.0f µs vs %.0f µs (%s) %s", svc, mirror, change(svc, mirror), x.how)
}

func writeExplanations(b *strings.Builder, res results) {
	for _, x := range explanations(res) {
		s, p := x.row.service, x.row.pgbench
		if len(s) == 0 || len(p) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n%s No target is judged by it: the ratios and targets are against the mirror back to back, unpinned. "+
			"Medians of %d rounds each, alternately, spread in brackets.\n\n", x.heading, x.intro, len(s))
		fmt.Fprintf(b, "| per handshake | billingd | %s | billingd against it |\n|---|--:|--:|--:|\n", x.mirror)
		fmt.Fprintf(b, "| PostgreSQL CPU, µs | %s | %s | %s |\n", withSpread("%.0f", s.cpu(cpuPostgres)), withSpread("%.0f", p.cpu(cpuPostgres)),
			change(s.cpu(cpuPostgres).median, p.cpu(cpuPostgres).median))
		fmt.Fprintf(b, "| handshakes per second | %s | %s | %s |\n", withSpread("%.0f", s.rate()), withSpread("%.0f", p.rate()), ratioText(x.row))
		fmt.Fprintf(b, "| errors | %s | %d | |\n\n", errorsText(s), p.errors())
	}
}

// explanationsText is what stands beside the PostgreSQL CPU target's
// figure ("" when no such row ran).
func explanationsText(res results) string {
	var parts []string
	for _, x := range explanations(res) {
		if x.row.pgbench.cpu(cpuPostgres).median > 0 {
			parts = append(parts, x.text())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "not judged, in rounds of their own: " + strings.Join(parts, "; ") + " (their tables)"
}

// errorsText is a side's errors, and the calls it shed among them.
func errorsText(s side) string {
	if s.shed() == 0 {
		return fmt.Sprint(s.errors())
	}
	return fmt.Sprintf("%d (%d shed)", s.errors(), s.shed())
}

package main

import (
	"strings"
	"testing"
	"time"
)

// The idling mirror's gap is billingd's 1-client handshake beyond the
// mirror's, less its backends' extra CPU, spread over the mirror's round
// trips.
func TestIdleGapSpreadsBillingdsExtraTimeOverTheRoundTrips(t *testing.T) {
	row := func(clients int, svcMs, mirrorMs, svcPG, mirrorPG float64) comparison {
		return comparison{workload: handshake, clients: clients,
			service: side{{p50: time.Duration(svcMs * float64(time.Millisecond)), cpu: cpuPerOp{postgres: svcPG}}},
			pgbench: side{{p50: time.Duration(mirrorMs * float64(time.Millisecond)), cpu: cpuPerOp{postgres: mirrorPG}}}}
	}
	for _, c := range []struct {
		name  string
		rows  []comparison
		trips int
		want  time.Duration
	}{
		// (6.76 − 2.73) ms over 5 round trips: 806 µs, to 810.
		{"1 client", []comparison{row(16, 38, 21, 0, 0), row(1, 6.76, 2.73, 0, 0)}, 5, 810 * time.Microsecond},
		// (6.76 − 2.73 − (3.486 − 2.524)) ms over 5: 614 µs, to 610.
		{"less the backends' extra CPU", []comparison{row(1, 6.76, 2.73, 3486, 2524)}, 5, 610 * time.Microsecond},
		{"backends cheaper: nothing added", []comparison{row(1, 6.76, 2.73, 2000, 2524)}, 5, 810 * time.Microsecond},
		{"under 5 µs a round trip", []comparison{row(1, 2.75, 2.73, 0, 0)}, 5, 0},
		{"no 1-client row", []comparison{row(16, 38, 21, 0, 0)}, 5, 0},
		{"billingd not slower", []comparison{row(1, 2.5, 2.73, 0, 0)}, 5, 0},
		{"no round trips", []comparison{row(1, 6.76, 2.73, 0, 0)}, 0, 0},
	} {
		if got := idleGap(c.rows, c.trips); got != c.want {
			t.Errorf("%s: idleGap = %s, want %s", c.name, got, c.want)
		}
	}
}

// The gap is spread over the round trips where withGaps makes the mirror
// wait: as many as billingd's calls make (roundtrips.go counts 2 + 3).
func TestMirrorRoundTripsAreTheScriptsWaits(t *testing.T) {
	for w, want := range map[workload]int{propose: 2, handshake: 5} {
		if got, err := mirrorRoundTrips(w); err != nil || got != want {
			t.Errorf("mirrorRoundTrips(%s) = %d, %v; want %d", w, got, err, want)
		}
	}
}

// The rows that explain PostgreSQL's CPU get their own tables, and stand
// beside its target, whose verdict stays the back-to-back mirror's.
func TestExplanationsAreShownButNotJudged(t *testing.T) {
	row := threeRounds() // billingd's backends 4950 µs
	for i := range row.pgbench {
		row.pgbench[i].cpu.postgres = 4000 // back to back: +24 %, missed
	}
	idle := threeRounds()
	idle.gap = 810 * time.Microsecond
	for i := range idle.pgbench {
		idle.pgbench[i].cpu.postgres = 5500 // idling: −10 %
	}
	idle.service[1].errors, idle.service[1].shed = 3, 2
	pinned := threeRounds() // 4950 vs 4600: +8 %
	pinned.pinned = "PostgreSQL on CPUs 0; billingd, the load generator and pgbench on CPUs 1"
	res := results{throughput: []comparison{row}, idle: idle, pinnedRow: pinned}

	var b strings.Builder
	writeExplanations(&b, res)
	for _, want := range []string{
		"### PostgreSQL's CPU against a mirror that idles", "waits **810µs after each round trip**",
		"| PostgreSQL CPU, µs | 4950 (2%) | 5500 | -10% |", "| handshakes per second | 225 (22%) | 400 (22%) | 56% (50–69%) |",
		"| errors | 3 (2 shed) | 0 | |",
		"### PostgreSQL's CPU on CPUs of its own", "pinned with taskset (PostgreSQL on CPUs 0;",
		"| PostgreSQL CPU, µs | 4950 (2%) | 4600 (4%) | +8% |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explanations:\n%s\nwant %q", b.String(), want)
		}
	}
	pgCPU := findTarget(t, targets(options{}, res), "handshake: PostgreSQL CPU per call within 15% of the mirror's")
	want := "4950 µs vs 4000 µs (+24%); not judged, in rounds of their own: 4950 µs vs 5500 µs (-10%) against the mirror idling 810µs per round trip; " +
		"4950 µs vs 4600 µs (+8%) with PostgreSQL on CPUs of its own (their tables)"
	if pgCPU.measured != want || pgCPU.met {
		t.Errorf("PostgreSQL CPU target: %+v, want measured %q and missed", pgCPU, want)
	}

	b.Reset()
	writeExplanations(&b, results{throughput: []comparison{row}, pinnedRow: threeRounds()})
	if b.Len() != 0 || explanationsText(results{}) != "" {
		t.Errorf("a run without those rows, or with an unpinned one, shows them: %q", b.String())
	}
}

// Their errors count in the run's "zero errors".
func TestExplanationsErrorsCount(t *testing.T) {
	idle, pinned := threeRounds(), threeRounds()
	idle.gap, pinned.pinned = 810*time.Microsecond, "somewhere"
	idle.pgbench[2].errors, pinned.service[0].errors = 1, 2
	errs := findTarget(t, targets(options{}, results{idle: idle, pinnedRow: pinned}), "zero errors")
	if errs.met || errs.measured != "3" {
		t.Errorf("zero errors: %+v, want 3 and missed", errs)
	}
}

func findTarget(t *testing.T, ts []target, goal string) target {
	t.Helper()
	for _, tg := range ts {
		if tg.goal == goal {
			return tg
		}
	}
	t.Fatalf("no target %q in %+v", goal, ts)
	return target{}
}

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

// The idling mirror's row gets its own table, and stands beside the
// PostgreSQL CPU target, whose verdict stays the back-to-back mirror's.
func TestIdleMirrorIsShownButNotJudged(t *testing.T) {
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
	var b strings.Builder
	writeIdleMirror(&b, idle)
	for _, want := range []string{"waits **810µs after each round trip**", "| PostgreSQL CPU, µs | 4950 (2%) | 5500 | -10% |",
		"| handshakes per second | 225 (22%) | 400 (22%) | 56% (50–69%) |", "| errors | 3 (2 shed) | 0 | |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("idle mirror table:\n%s\nwant %q", b.String(), want)
		}
	}
	var pgCPU target
	for _, tg := range rowTargets([]comparison{row}, row, idle, comparison{}) {
		if strings.Contains(tg.goal, "PostgreSQL CPU") {
			pgCPU = tg
		}
	}
	want := "4950 µs vs 4000 µs (+24%); not judged, other rounds: 4950 µs vs 5500 µs (-10%) against the mirror idling 810µs per round trip (its table)"
	if pgCPU.measured != want || pgCPU.met {
		t.Errorf("PostgreSQL CPU target: %+v, want measured %q and missed", pgCPU, want)
	}

	b.Reset()
	writeIdleMirror(&b, comparison{})
	if b.Len() != 0 || idleMirrorText(comparison{}) != "" {
		t.Errorf("a run without the idling mirror shows it: %q", b.String())
	}
}

// The idling mirror's errors count in the run's "zero errors".
func TestIdleMirrorsErrorsCount(t *testing.T) {
	idle := threeRounds()
	idle.gap = 810 * time.Microsecond
	idle.pgbench[2].errors = 1
	for _, tg := range targets(options{}, results{idle: idle}) {
		if tg.goal == "zero errors" && (tg.met || tg.measured != "1") {
			t.Errorf("zero errors: %+v, want 1 and missed", tg)
		}
	}
}

// The pinned row stands beside the target too, unjudged, and its errors
// count.
func TestPinnedRowIsShownButNotJudged(t *testing.T) {
	row := threeRounds()
	for i := range row.pgbench {
		row.pgbench[i].cpu.postgres = 4000 // unpinned: +24 %, missed
	}
	pinned := threeRounds() // 4950 vs 4600: +8 %
	pinned.pinned = "PostgreSQL on CPUs 0; billingd, the load generator and pgbench on CPUs 1"
	var b strings.Builder
	writePinnedRow(&b, pinned)
	for _, want := range []string{"pinned with taskset (PostgreSQL on CPUs 0;", "| PostgreSQL CPU, µs | 4950 (2%) | 4600 (4%) | +8% |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("pinned row table:\n%s\nwant %q", b.String(), want)
		}
	}
	for _, tg := range rowTargets([]comparison{row}, row, comparison{}, pinned) {
		want := "4950 µs vs 4000 µs (+24%); not judged, other rounds: 4950 µs vs 4600 µs (+8%) with PostgreSQL on cores of its own (its table)"
		if strings.Contains(tg.goal, "PostgreSQL CPU") && (tg.met || tg.measured != want) {
			t.Errorf("PostgreSQL CPU target: %+v, want measured %q and missed", tg, want)
		}
	}
	pinned.pgbench[0].errors = 2
	for _, tg := range targets(options{}, results{pinnedRow: pinned}) {
		if tg.goal == "zero errors" && (tg.met || tg.measured != "2") {
			t.Errorf("zero errors: %+v, want 2 and missed", tg)
		}
	}
	b.Reset()
	writePinnedRow(&b, threeRounds())
	if b.Len() != 0 || pinnedRowText(threeRounds()) != "" {
		t.Errorf("an unpinned row shows as pinned: %q", b.String())
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

// The idling mirror's gap is billingd's 1-client handshake beyond the
// mirror's, spread over both calls' round trips.
func TestIdleGapSpreadsBillingdsExtraTimeOverTheRoundTrips(t *testing.T) {
	row := func(clients int, svcMs, mirrorMs float64) comparison {
		return comparison{workload: handshake, clients: clients,
			service: side{{p50: time.Duration(svcMs * float64(time.Millisecond))}},
			pgbench: side{{p50: time.Duration(mirrorMs * float64(time.Millisecond))}}}
	}
	trips := []roundTrips{{call: "propose (first call)", median: 2}, {call: "confirm (second call)", median: 3}}
	for _, c := range []struct {
		name  string
		rows  []comparison
		trips []roundTrips
		want  time.Duration
	}{
		// (6.76 − 2.73) ms over 5 round trips: 806 µs, to 810.
		{"1 client", []comparison{row(16, 38, 21), row(1, 6.76, 2.73)}, trips, 810 * time.Microsecond},
		{"no 1-client row", []comparison{row(16, 38, 21)}, trips, 0},
		{"billingd not slower", []comparison{row(1, 2.5, 2.73)}, trips, 0},
		{"no round trips counted", []comparison{row(1, 6.76, 2.73)}, nil, 0},
	} {
		if got := idleGap(c.rows, c.trips); got != c.want {
			t.Errorf("%s: idleGap = %s, want %s", c.name, got, c.want)
		}
	}
}

// The idling mirror's row gets its own table, and its comparison stands
// beside the PostgreSQL CPU target, whose verdict stays the back-to-back
// mirror's.
func TestIdleMirrorIsShownBesideTheTarget(t *testing.T) {
	row := threeRounds() // billingd's backends 4950 µs, the mirror's 4600: +8%
	idle := threeRounds()
	idle.gap = 810 * time.Microsecond
	for i := range idle.pgbench {
		idle.pgbench[i].cpu.postgres = 5500 // billingd's 4950: −10%
	}
	var b strings.Builder
	writeIdleMirror(&b, idle)
	for _, want := range []string{"waits **810µs after each round trip**", "| PostgreSQL CPU, µs | 4950 (2%) | 5500 | -10% |", "| handshakes per second | 225 (22%) | 400 (22%) | 56% (50–69%) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("idle mirror table:\n%s\nwant %q", b.String(), want)
		}
	}
	var pgCPU target
	for _, tg := range rowTargets([]comparison{row}, row, idle) {
		if strings.Contains(tg.goal, "PostgreSQL CPU") {
			pgCPU = tg
		}
	}
	want := "4950 µs vs 4600 µs (+8%); 4950 µs vs 5500 µs (-10%) against the mirror idling 810µs per round trip as billingd's backends do"
	if pgCPU.measured != want || !pgCPU.met {
		t.Errorf("PostgreSQL CPU target: %+v, want measured %q and met", pgCPU, want)
	}

	b.Reset()
	writeIdleMirror(&b, comparison{})
	if b.Len() != 0 || idleMirrorText(comparison{}) != "" {
		t.Errorf("a run without the idling mirror shows it: %q", b.String())
	}
}

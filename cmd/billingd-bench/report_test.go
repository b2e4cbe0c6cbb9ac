package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUpdateDoc: make bench replaces the results between the markers of
// docs/performance.md and leaves the rest of the page as it was.
func TestUpdateDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "performance.md")
	page := "# Performance\n\nintro\n\n## Results\n\n" + docBegin + "\n\nold numbers\n" + docEnd + "\n\nwhat they say\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateDoc(path, "Measured now.\n\n### Memory\n\nnew numbers\n\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# Performance\n\nintro\n\n## Results\n\n" + docBegin + "\n\nMeasured now.\n\n### Memory\n\nnew numbers\n\n" + docEnd + "\n\nwhat they say\n"
	if string(got) != want {
		t.Errorf("page after updateDoc:\n%s\nwant:\n%s", got, want)
	}
	if err := updateDoc(filepath.Join(t.TempDir(), "missing.md"), "x"); err == nil {
		t.Error("updateDoc on a missing page succeeded")
	}
}

// TestPerformancePageHasMarkers: the page make bench writes into has its
// markers, once each.
func TestPerformancePageHasMarkers(t *testing.T) {
	data, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{docBegin, docEnd} {
		if n := strings.Count(string(data), m); n != 1 {
			t.Errorf("docs/performance.md has %d %q, want 1", n, m)
		}
	}
}

// threeRounds is a row of three rounds per side, for the report's tests.
func threeRounds() comparison {
	round := func(rate float64, p50ms, p99ms int, cpu cpuPerOp) summary {
		return summary{rate: rate, p50: time.Duration(p50ms) * time.Millisecond, p99: time.Duration(p99ms) * time.Millisecond,
			max: time.Duration(3*p99ms) * time.Millisecond, cpu: cpu}
	}
	return comparison{workload: handshake, clients: 16, rssKiB: 56 * 1024, elapsed: 47 * time.Second,
		service: side{
			round(200, 70, 130, cpuPerOp{billingd: 2900, bench: 1100, postgres: 5000}),
			round(250, 60, 120, cpuPerOp{billingd: 2800, bench: 1200, postgres: 4900}),
			round(225, 68, 132, cpuPerOp{billingd: 3000, bench: 1150, postgres: 4950}),
		},
		pgbench: side{
			round(400, 40, 70, cpuPerOp{postgres: 4600, pgbench: 400}),
			round(360, 44, 74, cpuPerOp{postgres: 4500, pgbench: 410}),
			round(450, 38, 66, cpuPerOp{postgres: 4700, pgbench: 420}),
		},
	}
}

// TestThroughputTableShowsMediansAndSpreads: a row's cells are the
// rounds' medians with (max − min) / median, and its ratio is the ratio of
// the medians with the round pairs' range.
func TestThroughputTableShowsMediansAndSpreads(t *testing.T) {
	var b strings.Builder
	writeThroughput(&b, []comparison{threeRounds()})
	// billingd 225/s, spread (250−200)/225 = 22%; p50 68 ms (15%), p99 130
	// ms (9%), longest 396 ms; pgbench 400/s (22%), 40 ms (15%), 70 ms
	// (11%), longest 222 ms; ratio 225/400 = 56%, pairs 50%, 69%, 50%.
	want := "| handshake | 16 | 225 (22%) | 68.00 (15%) | 130.00 (9%) | 396.00 | 0 | 400 (22%) | 40.00 (15%) | 70.00 (11%) | 222.00 | 56% (50–69%) | 56.0 |\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("throughput table:\n%s\nwant the row:\n%s", b.String(), want)
	}
}

func TestRoundsTableListsEveryRoundInOrder(t *testing.T) {
	var b strings.Builder
	writeRounds(&b, []comparison{threeRounds()})
	want := "| handshake | 16 | 200 · 250 · 225 | 400 · 360 · 450 | 50% · 69% · 50% | 47s |\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("rounds table:\n%s\nwant the row:\n%s", b.String(), want)
	}
}

func TestCPUTableShowsMediansAndSpreads(t *testing.T) {
	var b strings.Builder
	writeCPUBudget(&b, []comparison{threeRounds()})
	// billingd side 9000, 8900, 9100 µs; the mirror's 5000, 4910, 5120.
	want := "| handshake | 16 | 2900 (7%) | 1150 (9%) | 4950 (2%) | 9000 (2%) | 4600 (4%) | 410 (5%) | 5000 (4%) | 56% | 56% | 82% |\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("CPU table:\n%s\nwant the row:\n%s", b.String(), want)
	}
}

func TestOwnCPUTableSplitsTheKernelAndPricesTheSystemCalls(t *testing.T) {
	row := threeRounds()
	for i, k := range []float64{1200, 1000, 1100} {
		row.service[i].cpu.billingdKernel = k
		row.service[i].cpu.billingdReadsWrites = 40 + float64(i)
		row.service[i].cpu.billingdAllocKiB = 100 + 10*float64(i)
	}
	var b strings.Builder
	writeOwnCPU(&b, []comparison{row}, 5*time.Microsecond)
	// billingd 2900 µs (7%), 1100 in the kernel (18%), 41 reads and
	// writes (5%), 41 × 5 µs = 205 µs, 110 KiB allocated (18%).
	want := "| handshake | 16 | 2900 (7%) | 1100 (18%) | 41.0 (5%) | 205 | 110.0 (18%) |\n"
	if !strings.Contains(b.String(), want) || !strings.Contains(b.String(), "(5.00 µs, getppid)") {
		t.Errorf("own CPU table:\n%s\nwant the row:\n%s", b.String(), want)
	}

	row.service[1].cpu.billingdReadsWrites = -1 // a kernel without /proc/<pid>/io
	b.Reset()
	writeOwnCPU(&b, []comparison{row}, 5*time.Microsecond)
	if want := "| handshake | 16 | 2900 (7%) | 1100 (18%) | n/a | n/a | 110.0 (18%) |\n"; !strings.Contains(b.String(), want) {
		t.Errorf("own CPU table without counts:\n%s\nwant the row:\n%s", b.String(), want)
	}
}

func TestWithSpreadLeavesOutAnEmptyRange(t *testing.T) {
	if got := withSpread("%.0f", spread{300, 300, 300}); got != "300" {
		t.Errorf("one round: %q, want 300", got)
	}
	if got := withSpread("%.2f", spread{10, 9, 11}); got != "10.00 (20%)" {
		t.Errorf("three rounds: %q, want 10.00 (20%%)", got)
	}
}

// TestCeilingSaysWhatTheDiskAllows: the disk's flushes per second, and
// what they allow one client with the commits the tracer counted.
func TestCeilingSaysWhatTheDiskAllows(t *testing.T) {
	trips := []roundTrips{{call: "propose (first call)", commits: 1}, {call: "confirm (second call)", commits: 2}}
	var b strings.Builder
	writeCeiling(&b, commitCeiling{perSecond: 3293.788, method: "fdatasync", seconds: 1}, trips)
	for _, want := range []string{"`fdatasync`", "**3294 flushes per second**", "a handshake 3", "**3294 first calls or 1098 handshakes per second**"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ceiling paragraph:\n%s\nwant %q in it", b.String(), want)
		}
	}
	b.Reset()
	writeCeiling(&b, commitCeiling{missing: "no pg_test_fsync beside the PostgreSQL server binaries or on PATH"}, trips)
	if !strings.Contains(b.String(), "pg_test_fsync: no pg_test_fsync beside") {
		t.Errorf("ceiling paragraph without a measurement:\n%s", b.String())
	}
}

// The scheduling table takes each figure's median over the rounds the
// kernel kept schedstat for, the µs per time on a CPU per round, and says
// n/a for a side with none.
func TestSchedulingTableSkipsUnknownRounds(t *testing.T) {
	round := func(runs, onCPU float64) summary {
		return summary{cpu: cpuPerOp{postgresSched: schedPerOp{known: true, runs: runs, woken: runs - 2, preempted: 2,
			onCPU: onCPU, waitingForCPU: 100}}}
	}
	row := comparison{workload: handshake, clients: 16,
		service: side{round(10, 1500), {}, round(12, 1200), round(14, 2800)}, // one round unread
		pgbench: side{{}, {}}}
	var b strings.Builder
	writeScheduling(&b, []comparison{row})
	// runs 10, 12, 14: median 12 (33%); per time 150, 100, 200: median 150.
	want := "| handshake | 16 | 12.0 (33%) | 10.0 (40%) | 2.0 | 150 (67%) | 100 | n/a | n/a | n/a | n/a | n/a |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("no row\n%s\nin\n%s", want, b.String())
	}
}

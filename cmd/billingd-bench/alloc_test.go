package main

import (
	"strings"
	"testing"
)

// What the Go collector of billingd's /metrics says, cut to the two
// families the bench reads and one it does not.
const goCollectorSample = `# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="1"} 0.000311
go_gc_duration_seconds_sum 0.0123
go_gc_duration_seconds_count 417
# HELP go_memstats_alloc_bytes_total Total number of bytes allocated in heap until now, even if released already.
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 4.63701248e+08
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 57
`

func TestHeapUseReadsTheGoCollectorsCounts(t *testing.T) {
	h, err := parseHeapUse(strings.NewReader(goCollectorSample))
	if err != nil {
		t.Fatal(err)
	}
	if h.allocBytes != 463701248 || h.gcCycles != 417 {
		t.Errorf("got %+v, want 463701248 bytes and 417 collections", h)
	}
	if d := h.since(heapUse{allocBytes: 1 << 20, gcCycles: 400}); d.allocBytes != 463701248-1<<20 || d.gcCycles != 17 {
		t.Errorf("since: got %+v", d)
	}
}

func TestHeapUseRefusesMetricsWithoutTheCounts(t *testing.T) {
	without := "# TYPE go_goroutines gauge\ngo_goroutines 57\n"
	if _, err := parseHeapUse(strings.NewReader(without)); err == nil {
		t.Error("metrics without the Go collector's counts were read as zero")
	}
}

func TestPerOpDividesTheHeapCounts(t *testing.T) {
	u := cpuUse{billingdHeap: heapUse{allocBytes: 2000 * 150 * 1024, gcCycles: 8}}
	c := u.perOp(2000)
	if c.billingdAllocKiB != 150 || c.billingdGCsPerK != 4 {
		t.Errorf("got %.1f KiB and %.1f collections per 1000, want 150 and 4", c.billingdAllocKiB, c.billingdGCsPerK)
	}
}

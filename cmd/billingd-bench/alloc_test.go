package main

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/billingd/billingd/internal/telemetry"
)

// What the Go collector of billingd's /metrics says, cut to the family the
// bench reads and one it does not.
const goCollectorSample = `# HELP go_memstats_alloc_bytes_total Total number of bytes allocated in heap until now, even if released already.
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 4.63701248e+08
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 57
`

func TestAllocatedReadsTheGoCollectorsCount(t *testing.T) {
	n, err := parseAllocated(strings.NewReader(goCollectorSample))
	if err != nil || n != 463701248 {
		t.Errorf("got %d, %v; want 463701248 bytes", n, err)
	}
	without := "# TYPE go_goroutines gauge\ngo_goroutines 57\n"
	if _, err := parseAllocated(strings.NewReader(without)); err == nil {
		t.Error("metrics without the Go collector's count were read as zero")
	}
}

// sink keeps the test's allocation on the heap.
var sink []byte

// The bench reads billingd's own metrics handler: if it stopped serving the
// count (a client_golang upgrade, the memstats metrics disabled), every run
// would fail, so the test reads the real handler.
func TestAllocatedFollowsBillingdsMetrics(t *testing.T) {
	srv := httptest.NewServer(telemetry.New().Handler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	before, err := readAllocated(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	sink = make([]byte, 8<<20)
	runtime.GC() // the count is flushed from the per-P caches by a collection
	after, err := readAllocated(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 8<<20 {
		t.Errorf("allocated %d bytes between the reads, want at least 8 MiB", after-before)
	}
}

func TestPerOpDividesTheAllocation(t *testing.T) {
	u := cpuUse{billingdAllocBytes: 2000 * 150 * 1024}
	if c := u.perOp(2000); c.billingdAllocKiB != 150 {
		t.Errorf("got %.1f KiB, want 150", c.billingdAllocKiB)
	}
}

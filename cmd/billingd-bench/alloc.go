package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// heapUse is what billingd's Go runtime has done so far, read from the
// Go collector on its /metrics: the bytes it allocated on the heap and the
// garbage collections it finished. Like the reads and writes, these are
// counts of what a call does, not times: they move with the code, not with
// how busy the machine is, so a change that allocates less shows as a
// smaller count even when the CPU figures' noise hides it.
type heapUse struct {
	allocBytes, gcCycles int64
}

func (h heapUse) since(before heapUse) heapUse {
	return heapUse{allocBytes: h.allocBytes - before.allocBytes, gcCycles: h.gcCycles - before.gcCycles}
}

// The Go collector's names for the two counts.
const (
	metricAllocBytes = "go_memstats_alloc_bytes_total"
	metricGCCycles   = "go_gc_duration_seconds"
)

// readHeapUse scrapes billingd's /metrics at addr (its METRICS_ADDR). The
// scrape itself allocates in billingd, tens of kilobytes, against the
// hundreds of megabytes of a run.
func readHeapUse(ctx context.Context, addr string) (heapUse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return heapUse{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return heapUse{}, fmt.Errorf("read billingd's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return heapUse{}, fmt.Errorf("read billingd's metrics: %s", resp.Status)
	}
	return parseHeapUse(resp.Body)
}

// parseHeapUse takes the two counts from a text exposition.
func parseHeapUse(r io.Reader) (heapUse, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return heapUse{}, fmt.Errorf("parse billingd's metrics: %w", err)
	}
	alloc, ok := onlyMetric(families, metricAllocBytes)
	gc, ok2 := onlyMetric(families, metricGCCycles)
	if !ok || !ok2 || alloc.GetCounter() == nil || gc.GetSummary() == nil {
		return heapUse{}, fmt.Errorf("billingd's metrics lack %s or %s", metricAllocBytes, metricGCCycles)
	}
	return heapUse{allocBytes: int64(alloc.GetCounter().GetValue()), gcCycles: int64(gc.GetSummary().GetSampleCount())}, nil
}

func onlyMetric(families map[string]*dto.MetricFamily, name string) (*dto.Metric, bool) {
	f, ok := families[name]
	if !ok || len(f.GetMetric()) != 1 {
		return nil, false
	}
	return f.GetMetric()[0], true
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricAllocBytes is the Go collector's count of the bytes billingd's
// runtime has allocated on the heap so far.
const metricAllocBytes = "go_memstats_alloc_bytes_total"

// readAllocated scrapes that count from billingd's /metrics at addr (its
// METRICS_ADDR). Like the reads and writes, it is a count of what a call
// does, not a time: it moves with the code, not with how busy the machine
// is, so a change that allocates less shows as a smaller count even when
// the noise of the CPU figures hides it. (The garbage collections that
// allocation costs are not counted: how many there are depends on the live
// heap, which grows with requests in flight, and on GOGC, and a run of a
// few seconds finishes only a handful.)
//
// The scrape allocates a little in billingd itself: its own encoding,
// uncompressed (identity), so that promhttp does not build a gzip writer,
// close to a megabyte when its pool is empty.
func readAllocated(ctx context.Context, addr string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := get(ctx, "http://"+addr+"/metrics", http.Header{"Accept-Encoding": {"identity"}})
	if err != nil {
		return 0, fmt.Errorf("read billingd's metrics: %w", err)
	}
	defer body.Close()
	return parseAllocated(body)
}

// parseAllocated takes the count from a text exposition.
func parseAllocated(r io.Reader) (int64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parse billingd's metrics: %w", err)
	}
	f, ok := families[metricAllocBytes]
	if !ok || len(f.GetMetric()) != 1 || f.GetType() != dto.MetricType_COUNTER {
		return 0, fmt.Errorf("billingd's metrics lack the counter %s", metricAllocBytes)
	}
	return int64(f.GetMetric()[0].GetCounter().GetValue()), nil
}

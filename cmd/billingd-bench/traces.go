package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/tracing"
)

// traceCost is what OpenTelemetry tracing (internal/tracing) costs a
// request: off (no OTEL_EXPORTER_OTLP_ENDPOINT, as benchmarked above) and
// on, every span recorded. Measured with testing.Benchmark on a request
// that passes a second call's steps and does nothing else, since either
// number disappears in an end-to-end one.
type traceCost struct {
	off, on   time.Duration // added to a request
	handshake time.Duration
}

func measureTraces(rows []comparison) traceCost {
	onProvider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = onProvider.Shutdown(context.Background()) }()
	bare := requestCost(nil, false)
	cost := traceCost{off: max(requestCost(nil, true)-bare, 0), on: requestCost(tracing.New(onProvider), true) - bare}
	if row, ok := findRow(rows, handshake, 1); ok {
		cost.handshake = row.service.medianP50()
	}
	return cost
}

// requestCost is one request through t's instrumentation (nil: off): the
// server span, the second call's steps, and the edge's naming of the span;
// with instrumented false, the bare request it is compared with.
func requestCost(t *tracing.Tracing, instrumented bool) time.Duration {
	hook := t.StepHook()
	steps := billing.Paths()[1]
	h := t.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !instrumented {
			return
		}
		for _, step := range steps {
			hook.At(r.Context(), step, billing.StepEvent{Confirmation: "cfm_bench"})
		}
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetName("POST /api/billing/upgrade")
		}
	}))
	req := httptest.NewRequest("POST", "/api/billing/upgrade", nil)
	w := httptest.NewRecorder()
	r := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			h.ServeHTTP(w, req)
		}
	})
	return time.Duration(r.NsPerOp())
}

func writeTraces(b *strings.Builder, c traceCost) {
	b.WriteString("### Traces\n\n")
	fmt.Fprintf(b, "Without OTEL_EXPORTER_OTLP_ENDPOINT (this run) nothing is instrumented: tracing adds **%d ns** "+
		"to a second call's request", c.off.Nanoseconds())
	fmt.Fprintf(b, "; with traces on, its server and step spans add **%.1f µs** (database and Stripe spans come on top)",
		float64(c.on.Nanoseconds())/1e3)
	if c.handshake > 0 {
		fmt.Fprintf(b, ", against a median handshake of %s", msText(c.handshake))
	}
	b.WriteString(" (internal/tracing BenchmarkRequest).\n\n")
}

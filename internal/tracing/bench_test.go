package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/billingd/billingd/billing"
)

// BenchmarkRequest is what tracing adds to a request with two steps:
// "bare" is the handler alone; "off" is it as billingd serves it with no
// OTEL_EXPORTER_OTLP_ENDPOINT (the handler unwrapped, no step hook, and the
// edge's one check whether the request is traced); "on" records every span
// (sampled, batched to an exporter that drops them). make bench does not
// run it; docs/performance.md has its numbers.
func BenchmarkRequest(b *testing.B) {
	on := New(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter())))
	b.Cleanup(func() { _ = on.Shutdown(context.Background()) })
	for _, bc := range []struct {
		name    string
		tracing *Tracing
		edge    bool
	}{{"bare", nil, false}, {"off", nil, true}, {"on", on, true}} {
		b.Run(bc.name, func(b *testing.B) {
			hook := billing.StepHooks(bc.tracing.StepHook())
			h := bc.tracing.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hook.At(r.Context(), billing.StepConsume, billing.StepEvent{})
				hook.At(r.Context(), billing.StepSend, billing.StepEvent{})
				if bc.edge && trace.SpanFromContext(r.Context()).IsRecording() {
					trace.SpanFromContext(r.Context()).SetName("POST /api/billing/upgrade")
				}
			}))
			req := httptest.NewRequest("POST", "/api/billing/upgrade", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}

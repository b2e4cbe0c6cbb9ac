package httpedge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestSpanNamedByRoute: a traced request's span is named by its route
// template, as its log line and metric are, never by the path the client
// sent; an unmatched path keeps the name it had.
func TestSpanNamedByRoute(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	e := New(Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/nowhere" {
			SetRoute(r.Context(), "/api/billing/confirmations/:id/cancel")
		}
	}))
	for _, path := range []string{"/api/billing/confirmations/cfm_42/cancel", "/nowhere"} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "POST")
		serve(e, httptest.NewRequest("POST", path, nil).WithContext(ctx))
		span.End()
	}
	spans := rec.Ended()
	if got := spans[0].Name(); got != "POST /api/billing/confirmations/:id/cancel" {
		t.Errorf("span named %q, want the route template", got)
	}
	if got := spans[1].Name(); got != "POST" {
		t.Errorf("unmatched request's span renamed to %q", got)
	}
}

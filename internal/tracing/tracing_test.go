package tracing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/billingd/billingd/billing"
)

// callerParent is the span a caller's traceparent names.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerHeader = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func recording(t *testing.T) (*Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return New(tp), rec
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestSetupOffChangesNothing: without an OTLP endpoint (or with the SDK
// disabled) there is no provider, the global one stays the no-op one, and
// every piece of instrumentation is the thing it would have wrapped.
func TestSetupOffChangesNothing(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"unset":    {},
		"disabled": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		"none":     {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := Setup(context.Background(), env(vars), slog.New(slog.DiscardHandler))
			if err != nil || tr != nil {
				t.Fatalf("Setup = %v, %v; want nil, nil", tr, err)
			}
			if _, sdkProvider := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdkProvider {
				t.Fatal("the global tracer provider was replaced")
			}
			h := http.NewServeMux()
			if tr.Handler(h) != http.Handler(h) {
				t.Fatal("Handler wrapped the handler")
			}
			if tr.Transport(http.DefaultTransport) != http.DefaultTransport {
				t.Fatal("Transport wrapped the transport")
			}
			if tr.QueryTracer() != nil || tr.StepHook() != nil || tr.MCPMiddleware() != nil {
				t.Fatal("instrumentation installed while off")
			}
			log := slog.NewTextHandler(&bytes.Buffer{}, nil)
			if tr.LogHandler(log) != slog.Handler(log) {
				t.Fatal("LogHandler wrapped the handler")
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSetupRefusesWhatItCannotSend: billingd exports over OTLP/HTTP only;
// asking for gRPC or another exporter stops it at start, naming the
// variable, instead of sending HTTP to a gRPC port.
func TestSetupRefusesWhatItCannotSend(t *testing.T) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER"} {
		vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", name: "grpc"}
		if _, err := Setup(context.Background(), env(vars), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=grpc: err %v, want one naming it", name, err)
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		for _, bad := range []string{"collector:4318", "grpc://collector:4317", "http://"} {
			if _, err := Setup(context.Background(), env(map[string]string{name: bad}), slog.New(slog.DiscardHandler)); err == nil ||
				!strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: err %v, want one naming it", name, bad, err)
			}
		}
	}
}

// TestRequestIsOneTrace: the server span continues the caller's trace
// under the caller's span, the steps are spans under it, each ended where
// the next begins, and the request's log line carries the trace id.
func TestRequestIsOneTrace(t *testing.T) {
	tr, rec := recording(t)
	var logs bytes.Buffer
	log := slog.New(tr.LogHandler(slog.NewJSONHandler(&logs, nil)))
	hook := tr.StepHook()
	h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook.At(r.Context(), billing.StepConsume, billing.StepEvent{Confirmation: "cfm_1", Org: "acme"})
		hook.At(r.Context(), billing.StepSend, billing.StepEvent{Confirmation: "cfm_1", Org: "acme"})
		log.InfoContext(r.Context(), "request")
	}))
	req := httptest.NewRequest("POST", "/api/billing/upgrade?secret=no", nil)
	req.Header.Set("traceparent", callerHeader)
	req.Header.Set("Authorization", "Bearer pbc_never")
	h.ServeHTTP(httptest.NewRecorder(), req)

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans ended, want 3 (2 steps, the server's)", len(spans))
	}
	server := spans[2]
	if server.SpanKind() != trace.SpanKindServer || server.Parent().SpanID().String() != callerSpan ||
		server.SpanContext().TraceID().String() != callerTrace {
		t.Fatalf("server span %s (kind %v) parent %s trace %s: want the caller's", server.Name(), server.SpanKind(),
			server.Parent().SpanID(), server.SpanContext().TraceID())
	}
	for i, want := range []string{"second_call/consume", "second_call/send"} {
		step := spans[i]
		if step.Name() != want || step.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("span %d: %s under %s, want %s under the server span", i, step.Name(), step.Parent().SpanID(), want)
		}
		if !hasAttr(step.Attributes(), AttrConfirmationID.String("cfm_1")) {
			t.Errorf("%s lacks its confirmation id: %v", step.Name(), step.Attributes())
		}
	}
	if spans[0].EndTime().After(spans[1].StartTime()) {
		t.Error("consume's span ends after send's begins")
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if v := kv.Value.String(); strings.Contains(v, "pbc_never") || strings.Contains(v, "secret=no") {
				t.Errorf("%s records %s=%s", s.Name(), kv.Key, v)
			}
		}
	}
	if !strings.Contains(logs.String(), `"trace_id":"`+callerTrace+`"`) {
		t.Fatalf("log line without the trace id: %s", logs.String())
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range attrs {
		if kv == want {
			return true
		}
	}
	return false
}

// TestStepWithoutRequest: a step outside any request or round (no place
// to close its span) is an event on the current span.
func TestStepWithoutRequest(t *testing.T) {
	tr, rec := recording(t)
	ctx, span := tr.tracer.Start(context.Background(), "work")
	tr.StepHook().At(ctx, billing.StepSettleLock, billing.StepEvent{Confirmation: "cfm_2"})
	span.End()
	spans := rec.Ended()
	if len(spans) != 1 || len(spans[0].Events()) != 1 || spans[0].Events()[0].Name != "settle/lock" {
		t.Fatalf("want one span with the settle/lock event, got %v", spans)
	}
}

// TestRoundIsATraceOfItsOwn: a settler round starts a new trace even from
// a context inside another, and its steps are under it.
func TestRoundIsATraceOfItsOwn(t *testing.T) {
	tr, rec := recording(t)
	outer, span := tr.tracer.Start(context.Background(), "outer")
	defer span.End()
	ctx, end := tr.Round(outer, "settle unknown outcomes")
	tr.StepHook().At(ctx, billing.StepSettleResend, billing.StepEvent{Confirmation: "cfm_3"})
	end()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the step and the round", len(spans))
	}
	round := spans[1]
	if round.Parent().IsValid() || round.SpanContext().TraceID() == span.SpanContext().TraceID() {
		t.Fatal("the round is not a root span of a trace of its own")
	}
	if spans[0].Parent().SpanID() != round.SpanContext().SpanID() {
		t.Fatal("the step is not under the round")
	}
}

// TestMCPSpan: an MCP tools/call is a server span named after the tool,
// with the MCP attributes, under the span its request's traceparent names.
func TestMCPSpan(t *testing.T) {
	tr, rec := recording(t)
	next := func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		return &sdk.CallToolResult{IsError: true}, nil
	}
	header := http.Header{}
	header.Set("traceparent", callerHeader)
	req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: "upgrade_plan"}, Extra: &sdk.RequestExtra{Header: header}}
	if _, err := tr.MCPMiddleware()(next)(context.Background(), "tools/call", req); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Name() != "tools/call upgrade_plan" || s.Parent().SpanID().String() != callerSpan {
		t.Fatalf("span %q under %s", s.Name(), s.Parent().SpanID())
	}
	for _, want := range []attribute.KeyValue{AttrMCPMethod.String("tools/call"), AttrToolName.String("upgrade_plan"),
		AttrErrorType.String(errorTypeTool)} {
		if !hasAttr(s.Attributes(), want) {
			t.Errorf("missing %s=%s in %v", want.Key, want.Value.String(), s.Attributes())
		}
	}
}

// TestMCPErrorTextNotRecorded: a JSON-RPC error's text may quote the call's
// arguments (a confirm token), so its span records only that it failed.
func TestMCPErrorTextNotRecorded(t *testing.T) {
	tr, rec := recording(t)
	next := func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		return nil, errors.New(`invalid params: confirm_token "pbc_secret" is not a string`)
	}
	req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: "upgrade_plan"}}
	if _, err := tr.MCPMiddleware()(next)(context.Background(), "tools/call", req); err == nil {
		t.Fatal("the error was swallowed")
	}
	s := rec.Ended()[0]
	if s.Status().Code != codes.Error || strings.Contains(s.Status().Description, "pbc_") || len(s.Events()) != 0 {
		t.Fatalf("span status %+v, events %v: want an error without its text", s.Status(), s.Events())
	}
	if !hasAttr(s.Attributes(), AttrErrorType.String(errorTypeJSONRPC)) {
		t.Fatalf("no error.type in %v", s.Attributes())
	}
}

// TestMCPMetaTraceContext: a client's trace context in params._meta
// (SEP-414) is the MCP span's parent, linked to the HTTP server span the
// header names; a request without params is traced as well.
func TestMCPMetaTraceContext(t *testing.T) {
	tr, rec := recording(t)
	next := func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) { return nil, nil }
	header := http.Header{}
	header.Set("traceparent", callerHeader)
	const metaSpan = "1111111111111111"
	meta := "00-22222222222222222222222222222222-" + metaSpan + "-01"
	req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: "list_plans", Meta: sdk.Meta{"traceparent": meta}},
		Extra: &sdk.RequestExtra{Header: header}}
	if _, err := tr.MCPMiddleware()(next)(context.Background(), "tools/call", req); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.MCPMiddleware()(next)(context.Background(), "tools/list", &sdk.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Parent().SpanID().String() != metaSpan || len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID().String() != callerSpan {
		t.Fatalf("span under %s linked to %v: want under the _meta span, linked to the header's", s.Parent().SpanID(), s.Links())
	}
}

package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names billingd's own spans (steps, MCP, rounds).
const instrumentationName = "github.com/billingd/billingd/internal/tracing"

// Tracing is billingd's tracer provider and the instrumentation built on
// it. A nil *Tracing is tracing off: every method is then free.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// Enabled reports whether getenv asks for traces: an OTLP endpoint is set
// and the SDK is not disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup starts tracing when getenv asks for it (Enabled) and returns nil,
// with nothing changed, when it does not. On, it installs the provider and
// the W3C trace-context propagator as OpenTelemetry's globals, and has the
// SDK's errors (a collector that cannot be reached) logged on log as
// warnings. The caller must Shutdown what it returns, which flushes the
// spans not yet sent.
//
// The exporter is OTLP over HTTP (protobuf); the SDK reads its OTEL_*
// variables from the process environment itself. Invalid settings stop
// billingd at start, naming the variable.
func Setup(ctx context.Context, getenv func(string) string, log *slog.Logger) (*Tracing, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	if err := checkEnv(getenv); err != nil {
		return nil, err
	}
	// Before the exporter, which reports the variables it cannot use here.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("traces: OpenTelemetry SDK error; spans may be lost", "err", err)
	}))
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "billingd"), attribute.String("service.version", version())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the defaults above
	)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The sampler is the SDK's default: OTEL_TRACES_SAMPLER, or parent-based
	// always-on.
	t := New(sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)))
	otel.SetTracerProvider(t.provider)
	otel.SetTextMapPropagator(t.propagator)
	return t, nil
}

// checkEnv refuses what the SDK would otherwise get silently wrong: billingd
// exports only over OTLP/HTTP, to an http(s) URL.
func checkEnv(getenv func(string) string) error {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%s=%s: want the collector's http:// or https:// URL", name, v)
			}
		}
	}
	if v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v != "" && v != "otlp" {
		return fmt.Errorf("OTEL_TRACES_EXPORTER=%s: billingd exports traces over OTLP only (otlp, or none)", v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(name)); v != "" && v != "http/protobuf" {
			return fmt.Errorf("%s=%s: billingd exports traces over OTLP/HTTP only (http/protobuf)", name, v)
		}
	}
	return nil
}

// New is tracing on provider, with W3C trace context as the propagator
// (tests pass a provider with an in-memory exporter).
func New(provider *sdktrace.TracerProvider) *Tracing {
	return &Tracing{provider: provider, tracer: provider.Tracer(instrumentationName),
		propagator: propagation.TraceContext{}}
}

// Shutdown sends the spans not yet sent and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// untraced are the paths that get no trace: probes that a load balancer
// calls every few seconds would bury the traces anyone reads.
var untraced = map[string]bool{"/healthz": true, "/readyz": true}

// Handler wraps the API listener's root handler: every request is a server
// span, a child of the caller's traceparent when it sends one. The span is
// named by its method until the edge names its route (internal/httpedge);
// the money-path steps of the request are spans under it.
//
// The span context is also written into the request's traceparent header,
// replacing the caller's: the MCP SDK hands tool handlers a context of
// their own, not the request's, and reads the trace from the header
// (MCPMiddleware).
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, end := t.stepSpans(r.Context())
		defer end()
		t.propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	return otelhttp.NewHandler(inner, "billingd",
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
}

// Transport wraps the transport of Stripe's HTTP client: each request is a
// client span, carrying the method, URL and status (never a header, so
// never the secret key).
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "stripe " + r.Method }),
	)
}

// QueryTracer returns the pgx tracer that makes every database round trip
// a span (nil when off). Spans carry the statement text, never its
// parameters (otelpgx records them only when asked to).
func (t *Tracing) QueryTracer() pgx.QueryTracer {
	if t == nil {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.provider))
}

// Round starts a trace of its own for one round of background work (the
// settler's), with step spans under it; end finishes it.
func (t *Tracing) Round(ctx context.Context, name string) (_ context.Context, end func()) {
	if t == nil {
		return ctx, func() {}
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal))
	ctx, endSteps := t.stepSpans(ctx)
	return ctx, func() {
		endSteps()
		span.End()
	}
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "devel"
}

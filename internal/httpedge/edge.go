// Package httpedge is billingd's one HTTP edge: the root handler that every
// HTTP request passes through before it reaches the REST API (rest) or the
// MCP endpoint (mcp). It owns what both transports share, so that each is
// done once and the same way:
//
//   - billingd's own request id on every request and response, the
//     caller's X-Request-Id kept apart (X-Client-Request-Id, log field
//     client_request_id), never used as billingd's;
//   - the request body limit (64 KiB, contract §6);
//   - one access-log line and one metric sample per request, labelled by a
//     bounded method and the route template, never by raw client input;
//   - X-Content-Type-Options: nosniff on every response, and
//     Cache-Control: no-store on those that carry tokens or account data;
//   - the contract's error envelope {"error":{"code","message","request_id"}}
//     for every error, including the plain-text ones of handlers billingd
//     does not own (the MCP SDK's);
//   - bearer-token authentication and the WWW-Authenticate challenge
//     (bearer.go), built by one function.
//
// internal/app assembles the edge with both transports behind it.
package httpedge

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/requestid"
)

// MaxBodyBytes is the largest request body accepted (contract §6).
const MaxBodyBytes = 64 << 10

// MaxHeaderBytes bounds a request's header block, far below net/http's
// default of 1 MiB: billingd's requests carry a bearer token and a few
// short headers, and every byte of a header is memory a client chose.
const MaxHeaderBytes = 64 << 10

// RequestObserver receives one measurement per answered request
// (internal/telemetry.Metrics). method is already bounded (MethodLabel) and
// route is a template or "unmatched".
type RequestObserver interface {
	ObserveRequest(method, route string, status int, elapsed time.Duration)
}

// Config configures the edge.
type Config struct {
	Logger   *slog.Logger
	Observer RequestObserver
	// NoStorePrefixes are the path prefixes whose responses carry tokens or
	// account data and must never be stored by a cache.
	NoStorePrefixes []string
}

// Edge is the root handler: the shared middleware around the transports,
// each mounted at its own exact path (Handle) or as the fallback.
type Edge struct {
	cfg      Config
	log      *slog.Logger
	paths    map[string]http.Handler
	fallback http.Handler
}

// New returns an edge whose routes are fallback (the REST API) and whatever
// Handle adds.
func New(cfg Config, fallback http.Handler) *Edge {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Edge{cfg: cfg, log: log, paths: map[string]http.Handler{}, fallback: fallback}
}

// Handle mounts h at exactly path (no prefix match, no path cleaning, so
// the fallback router sees every other path as the client sent it). Its
// requests are labelled path in logs and metrics. The fallback names its
// route templates itself (SetRoute); what it does not name stays
// "unmatched".
func (e *Edge) Handle(path string, h http.Handler) {
	e.paths[path] = h
}

func (e *Edge) route(w http.ResponseWriter, r *http.Request) {
	if h, ok := e.paths[r.URL.Path]; ok {
		SetRoute(r.Context(), r.URL.Path)
		h.ServeHTTP(w, r)
		return
	}
	e.fallback.ServeHTTP(w, r)
}

// ServeHTTP runs the request through the shared middleware to its route.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ex := &exchange{id: newRequestID(), clientID: clientRequestID(r), route: routeUnmatched}
	ctx := withExchange(requestid.With(r.Context(), ex.id), ex)
	r = r.WithContext(ctx)
	r.Header.Set(HeaderRequestID, ex.id) // handlers that read headers (MCP tools) see billingd's id

	ew := &writer{ResponseWriter: w, r: r, noStore: e.noStore(r.URL.Path)}
	h := ew.Header()
	h.Set(HeaderRequestID, ex.id)
	if ex.clientID != "" {
		h.Set(HeaderClientRequestID, ex.clientID)
	}
	defer e.finish(ew, r, ex, start)
	if r.ContentLength > MaxBodyBytes {
		WriteError(ew, r, billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB"))
		return
	}
	// The server's own writer, not ew: MaxBytesReader tells it to close the
	// connection after an oversized body, through a method wrappers hide.
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	e.route(ew, r)
}

// finish recovers a panicking handler (a 500 envelope when nothing was
// written yet), then logs and measures the request.
func (e *Edge) finish(w *writer, r *http.Request, ex *exchange, start time.Time) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			panic(p)
		}
		e.log.ErrorContext(r.Context(), "handler panicked", "request_id", ex.id, "panic", p, "stack", string(debug.Stack()))
		if !w.wroteHeader {
			WriteError(w, r, billing.Errorf(billing.CodeInternal, "internal error"))
		}
	}
	status := w.status
	if !w.wroteHeader {
		status = http.StatusOK
	}
	elapsed := time.Since(start)
	method := MethodLabel(r.Method)
	attrs := []any{"method", method, "route", ex.route, "status", status,
		"duration_ms", elapsed.Milliseconds(), "request_id", ex.id}
	if ex.clientID != "" {
		attrs = append(attrs, "client_request_id", ex.clientID)
	}
	if ex.org != "" || ex.principal != "" {
		attrs = append(attrs, "org", ex.org, "principal", ex.principal)
	}
	nameSpan(r.Context(), method, ex)
	e.log.InfoContext(r.Context(), "request", attrs...)
	if e.cfg.Observer != nil {
		e.cfg.Observer.ObserveRequest(method, ex.route, status, elapsed)
	}
}

func (e *Edge) noStore(path string) bool {
	for _, prefix := range e.cfg.NoStorePrefixes {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// methods are the request methods that get a label of their own; billingd
// serves no others.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// MethodLabel is method when it is a standard method billingd may serve,
// else "OTHER". A method is whatever token a client sends, up to the header
// limit, so a raw method in a metric label or a log field lets any client
// mint series and fill memory.
func MethodLabel(method string) string {
	if methods[method] {
		return method
	}
	return "OTHER"
}

// nameSpan names the request's server span, when it is traced
// (internal/tracing), by its route template, as its log line and metric
// are: "POST /api/billing/upgrade". Untraced, it is one context lookup.
func nameSpan(ctx context.Context, method string, ex *exchange) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if ex.route != routeUnmatched {
		span.SetName(method + " " + ex.route)
		span.SetAttributes(semconv.HTTPRoute(ex.route))
	}
	span.SetAttributes(attribute.String("billingd.request_id", ex.id))
}

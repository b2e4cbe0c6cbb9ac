package httpedge

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/requestid"
)

type observed struct{ method, route string }

type recorder []observed

func (r *recorder) ObserveRequest(method, route string, _ int, _ time.Duration) {
	*r = append(*r, observed{method, route})
}

func serve(e http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w
}

func decodeEnvelope(t *testing.T, w *httptest.ResponseRecorder) Envelope {
	t.Helper()
	var env Envelope
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error.Code == "" {
		t.Fatalf("not the envelope (%v): %q", err, w.Body)
	}
	if env.Error.RequestID == "" || env.Error.RequestID != w.Header().Get(HeaderRequestID) {
		t.Fatalf("request_id %q, header %q", env.Error.RequestID, w.Header().Get(HeaderRequestID))
	}
	return env
}

// TestPlainTextErrorsBecomeEnvelopes: an error a handler billingd does not
// own writes as plain text (the MCP SDK's http.Error) reaches the client as
// the contract's envelope, without the handler's text; JSON bodies (the
// envelope, JSON-RPC errors) and successes pass unchanged.
func TestPlainTextErrorsBecomeEnvelopes(t *testing.T) {
	fallback := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sdk-404":
			http.Error(w, `session "evil<script>" not found`, http.StatusNotFound)
		case "/sdk-413":
			http.Error(w, "request body exceeds 65536 bytes", http.StatusRequestEntityTooLarge)
		case "/jsonrpc":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}`))
		default:
			_, _ = w.Write([]byte("hello"))
		}
	})
	e := New(Config{}, fallback)
	for path, want := range map[string]string{"/sdk-404": "not_found", "/sdk-413": "request_too_large"} {
		w := serve(e, httptest.NewRequest("GET", path, nil))
		env := decodeEnvelope(t, w)
		if string(env.Error.Code) != want || strings.Contains(w.Body.String(), "evil") || strings.Contains(w.Body.String(), "65536") {
			t.Errorf("%s: %d %s", path, w.Code, w.Body)
		}
	}
	if w := serve(e, httptest.NewRequest("GET", "/jsonrpc", nil)); !strings.Contains(w.Body.String(), "-32600") {
		t.Errorf("a JSON-RPC error was rewritten: %s", w.Body)
	}
	if w := serve(e, httptest.NewRequest("GET", "/", nil)); w.Code != 200 || w.Body.String() != "hello" {
		t.Errorf("a success was changed: %d %q", w.Code, w.Body)
	}
}

// TestBodyLimit: a body declared larger than 64 KiB is refused before any
// handler runs; one that turns out larger fails the handler's read.
func TestBodyLimit(t *testing.T) {
	var readErr error
	e := New(Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, readErr = bytes.NewBuffer(nil).ReadFrom(r.Body)
		WriteError(w, r, readErr)
	}))
	big := strings.Repeat("x", MaxBodyBytes+1)
	w := serve(e, httptest.NewRequest("POST", "/", strings.NewReader(big)))
	if env := decodeEnvelope(t, w); w.Code != 413 || env.Error.Code != "request_too_large" || readErr != nil {
		t.Fatalf("declared: %d %s (handler ran: %v)", w.Code, w.Body, readErr)
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(big))
	r.ContentLength = -1 // streamed
	serve(e, r)
	var tooLarge *http.MaxBytesError
	if !errorsAs(readErr, &tooLarge) {
		t.Fatalf("streamed: read error %v", readErr)
	}
}

// TestPanicIsAnEnvelope: a panicking handler answers 500 with the envelope
// and is logged and measured like any request.
func TestPanicIsAnEnvelope(t *testing.T) {
	obs := &recorder{}
	e := New(Config{Observer: obs}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	w := serve(e, httptest.NewRequest("GET", "/", nil))
	if env := decodeEnvelope(t, w); w.Code != 500 || env.Error.Code != "internal" || strings.Contains(w.Body.String(), "boom") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if len(*obs) != 1 {
		t.Fatalf("observed %v", *obs)
	}
}

// TestRequestIDIsBillingds: every request gets billingd's own id (header,
// context, the request header handlers read); a client's X-Request-Id is
// echoed apart and logged as client_request_id, never used as the id.
func TestRequestIDIsBillingds(t *testing.T) {
	var logs bytes.Buffer
	var inside, header string
	e := New(Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside, header = requestid.From(r.Context()), r.Header.Get(HeaderRequestID)
	}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(HeaderRequestID, "chosen-by-client")
	w := serve(e, r)
	id := w.Header().Get(HeaderRequestID)
	if id == "" || id == "chosen-by-client" || inside != id || header != id {
		t.Fatalf("id %q, in context %q, in header %q", id, inside, header)
	}
	if got := w.Header().Get(HeaderClientRequestID); got != "chosen-by-client" {
		t.Fatalf("client id echoed as %q", got)
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line["request_id"] != id || line["client_request_id"] != "chosen-by-client" {
		t.Fatalf("log line %s", logs.String())
	}
	r = httptest.NewRequest("GET", "/", nil)
	r.Header.Set(HeaderRequestID, strings.Repeat("a", 65)+"\x01")
	if w := serve(e, r); w.Header().Get(HeaderClientRequestID) != "" {
		t.Fatal("an insane client id was echoed")
	}
}

// TestSecurityHeaders: nosniff on every response; no-store under the
// prefixes that carry tokens or account data, even when the handler set
// another Cache-Control; other responses keep theirs.
func TestSecurityHeaders(t *testing.T) {
	e := New(Config{NoStorePrefixes: []string{"/api/", "/mcp"}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Path == "/api/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	for path, cache := range map[string]string{"/api/billing/plans": "no-store", "/api/missing": "no-store", "/mcp": "no-store", "/": "no-cache"} {
		w := serve(e, httptest.NewRequest("GET", path, nil))
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("Cache-Control") != cache {
			t.Errorf("%s: %v", path, w.Header())
		}
	}
}

// TestMethodLabelIsBounded: a method a client made up is logged and
// measured as OTHER, so that long or many methods cannot grow memory or
// /metrics.
func TestMethodLabelIsBounded(t *testing.T) {
	var logs bytes.Buffer
	obs := &recorder{}
	e := New(Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Observer: obs}, http.NotFoundHandler())
	long := strings.Repeat("M", 1<<16)
	for _, m := range []string{"GET", long, "PROPFIND", "get"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Method = m
		serve(e, r)
	}
	want := []observed{{"GET", "unmatched"}, {"OTHER", "unmatched"}, {"OTHER", "unmatched"}, {"OTHER", "unmatched"}}
	for i := range want {
		if i >= len(*obs) || (*obs)[i] != want[i] {
			t.Fatalf("observed %.80v, want %v", *obs, want)
		}
	}
	if strings.Contains(logs.String(), "MMMM") {
		t.Fatal("the raw method reached the log")
	}
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }

// TestChallenge: the one builder of bearer challenges gives the three forms
// of contract §4: no token, a refused token, a missing scope.
func TestChallenge(t *testing.T) {
	const metadata = "https://b.example/.well-known/oauth-protected-resource"
	bare := httptest.NewRequest("GET", "/", nil)
	withToken := httptest.NewRequest("GET", "/", nil)
	withToken.Header.Set("Authorization", "Bearer x")
	unauthorized := billing.Errorf(billing.CodeUnauthorized, "no")
	for _, c := range []struct {
		r    *http.Request
		err  error
		want string
	}{
		{bare, unauthorized, `Bearer resource_metadata="` + metadata + `", scope="billing:read billing:write"`},
		{withToken, unauthorized, `Bearer error="invalid_token", resource_metadata="` + metadata + `", scope="billing:read billing:write"`},
		{withToken, billing.Errorf(billing.CodeInsufficientScope, "no"),
			`Bearer error="insufficient_scope", scope="billing:read billing:write", resource_metadata="` + metadata + `"`},
	} {
		if got := Challenge(c.r, metadata, c.err, "billing:read", "billing:write"); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

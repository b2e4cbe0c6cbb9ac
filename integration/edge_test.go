package integration

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/auth"
)

// envelope is the contract's error body, decoded strictly enough to tell
// it from a JSON-RPC error or plain text.
type envelope struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// wantEnvelope checks that r is the contract's error envelope with code,
// whose request_id is billingd's id of the request (X-Request-Id).
func wantEnvelope(t *testing.T, r response, status int, code string) envelope {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want JSON: %s", ct, r.Body)
	}
	var e envelope
	r.decode(t, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error %+v, want code %s: %s", e.Error, code, r.Body)
	}
	if id := r.Header.Get("X-Request-Id"); id == "" || e.Error.RequestID != id {
		t.Fatalf("request_id %q, X-Request-Id %q", e.Error.RequestID, id)
	}
	if r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("no nosniff on an error: %v", r.Header)
	}
	return e
}

// TestMCPErrorEnvelope: /mcp sits behind the same edge as the REST API, so
// its HTTP-level errors are the contract's envelope too (not the SDK's
// plain text), with the bearer challenge REST sends: 401 without or with a
// refused token, 413 for a body over 64 KiB, whether it says so in
// Content-Length or streams it; and the SDK's own refusals.
func TestMCPErrorEnvelope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("env", "Envelope", "pro")
	metadata := h.url + "/.well-known/oauth-protected-resource/mcp"

	t.Run("401 without a token", func(t *testing.T) {
		r := h.mcpPost("", "", initializeRequest)
		wantEnvelope(t, r, http.StatusUnauthorized, "unauthorized")
		wantChallenge(t, r, http.StatusUnauthorized, `Bearer resource_metadata="`+metadata+`", scope="billing:read billing:write"`)
	})
	t.Run("401 with a refused token", func(t *testing.T) {
		r := h.mcpPost("", "not-a-jwt", initializeRequest)
		wantEnvelope(t, r, http.StatusUnauthorized, "unauthorized")
		wantChallenge(t, r, http.StatusUnauthorized,
			`Bearer error="invalid_token", resource_metadata="`+metadata+`", scope="billing:read billing:write"`)
	})
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 65<<10) + `"}}`
	t.Run("413 by Content-Length", func(t *testing.T) {
		r := h.mcpPost("", h.mcpUser("env", "alice"), big)
		wantEnvelope(t, r, http.StatusRequestEntityTooLarge, "request_too_large")
	})
	t.Run("413 streamed", func(t *testing.T) {
		r := rawRequest(t, h.url, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+h.mcpUser("env", "alice")+
			"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big))
		wantEnvelope(t, r, http.StatusRequestEntityTooLarge, "request_too_large")
	})
	t.Run("413 without a token", func(t *testing.T) {
		wantEnvelope(t, h.mcpPost("", "", big), http.StatusRequestEntityTooLarge, "request_too_large")
	})
	t.Run("the SDK's refusals", func(t *testing.T) {
		req, _ := http.NewRequest("GET", h.url+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+h.mcpUser("env", "alice"))
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", "no-such-session")
		e := wantEnvelope(t, h.roundTrip(req), http.StatusNotFound, "not_found")
		if strings.Contains(e.Error.Message, "no-such-session") {
			t.Fatalf("the message echoes the request: %q", e.Error.Message)
		}
		r := h.mcpPost("", h.mcpUser("env", "alice"), `{"jsonrpc":"2.0","id":1,"method":`)
		wantEnvelope(t, r, http.StatusBadRequest, "invalid_request")
	})
	t.Run("foreign Host", func(t *testing.T) {
		r := h.mcpPost("attacker.example", h.mcpUser("env", "alice"), initializeRequest)
		e := wantEnvelope(t, r, http.StatusForbidden, "operation_denied")
		if strings.Contains(e.Error.Message, "attacker") {
			t.Fatalf("the message echoes the Host: %q", e.Error.Message)
		}
	})
	t.Run("insufficient scope keeps JSON-RPC, with the envelope as its data", func(t *testing.T) {
		r := h.mcpPost("", h.mcpToken("env", "reader", "agent", auth.ScopeRead), toolCallRequest("upgrade_plan", `{"to":"scale"}`))
		if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), `"request_id":"`+r.Header.Get("X-Request-Id")+`"`) {
			t.Fatalf("403 %d %s", r.Status, r.Body)
		}
	})
}

// rawRequest writes a request by hand (for framing net/http's client would
// not produce) and reads the answer.
func rawRequest(t *testing.T, baseURL, raw string) response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(baseURL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = conn.Write([]byte(raw)) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: []byte(body.String())}
}

// TestEdgeHostileMethodsAndHeaders: the hostile review's reproduction. A
// 1 MB method name no longer reaches billingd (the header limit is 64 KiB:
// 431 from net/http); 100 requests with made-up methods under that limit
// are logged and measured as one method, OTHER, so memory and /metrics do
// not grow with them; a header block over 64 KiB is refused the same way.
func TestEdgeHostileMethodsAndHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	host := strings.TrimPrefix(h.url, "http://")

	r := rawRequest(t, h.url, strings.Repeat("M", 1<<20)+" /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if r.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("1 MB method: %d", r.Status)
	}
	made := func(i int) string { return fmt.Sprintf("X%d%s", i, strings.Repeat("M", 30<<10)) }
	rawRequest(t, h.url, made(-1)+" /healthz HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n") // the OTHER series exist
	before := h.scrape()
	for i := range 100 {
		method := made(i)
		r := rawRequest(t, h.url, method+" /healthz HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		if r.Status >= 500 || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("made-up method: %d %v", r.Status, r.Header)
		}
	}
	after := h.scrape()
	if got := after[`billingd_http_requests_total{method="OTHER",route="/healthz",status="400"}`] -
		before[`billingd_http_requests_total{method="OTHER",route="/healthz",status="400"}`]; got != 100 {
		t.Errorf("made-up methods counted %v times under OTHER, want 100", got)
	}
	for series := range after {
		if strings.Contains(series, "MMMM") {
			t.Fatalf("a series is labelled with a client's method: %.120s", series)
		}
	}
	if len(after) != len(before) {
		t.Errorf("series grew from %d to %d", len(before), len(after))
	}

	req, _ := http.NewRequest("GET", h.url+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
	if r := h.roundTrip(req); r.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB header: %d", r.Status)
	}
}

// TestMetricsOwnListener: /metrics is served on the metrics listener
// (METRICS_ADDR) and not on the API's, where it is an unknown path.
func TestMetricsOwnListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantEnvelope(t, h.offSpec().do("GET", "/metrics", "", nil), http.StatusNotFound, "not_found")
	req, _ := http.NewRequest("GET", h.metricsURL+"/metrics", nil)
	r := h.roundTrip(req)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "billingd_http_requests_total") ||
		r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("metrics listener: %d %v", r.Status, r.Header)
	}
}

// TestClientRequestIDKeptApart: a caller-chosen X-Request-Id is echoed in
// X-Client-Request-Id but is never billingd's id: the response's
// X-Request-Id, the error envelope and the audit events carry billingd's
// own, so nobody can make unrelated events look related.
func TestClientRequestIDKeptApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("rid", "Request ids", "pro")
	tok := h.user("rid", "alice")
	send := func(body string) response {
		req, _ := http.NewRequest("POST", h.url+"/api/billing/upgrade", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "forged-id")
		return h.send(req)
	}
	first := send(`{"to":"scale"}`)
	if first.Status != http.StatusAccepted {
		t.Fatalf("first call %d %s", first.Status, first.Body)
	}
	if id := first.Header.Get("X-Request-Id"); id == "" || id == "forged-id" || first.Header.Get("X-Client-Request-Id") != "forged-id" {
		t.Fatalf("X-Request-Id %q, X-Client-Request-Id %q", id, first.Header.Get("X-Client-Request-Id"))
	}
	wrong := send(`{"to":"scale","confirm_token":"pbc_` + strings.Repeat("A", 43) + `"}`)
	if e := wantEnvelope(t, wrong, http.StatusConflict, "consent_token_invalid"); e.Error.RequestID == "forged-id" {
		t.Fatal("the envelope carries the client's id")
	}
	events := h.auditEvents("rid")
	if len(events) == 0 {
		t.Fatal("no audit events")
	}
	for _, e := range events {
		if e.RequestID == "forged-id" || e.RequestID == "" {
			t.Fatalf("audit event %s has request_id %q", e.Event, e.RequestID)
		}
	}
	if events[0].RequestID != first.Header.Get("X-Request-Id") {
		t.Fatalf("TOKEN_ISSUED request_id %q, response %q", events[0].RequestID, first.Header.Get("X-Request-Id"))
	}
}

// TestNoStoreAndNoSniff: every response is nosniff; every response that can
// carry a token or account data (the REST API, MCP) is no-store, errors
// included.
func TestNoStoreAndNoSniff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("cache", "Cache", "pro")
	tok := h.user("cache", "alice")
	for _, c := range []struct {
		name    string
		r       response
		noStore bool
	}{
		{"proposal", h.do("POST", "/api/billing/upgrade", tok, map[string]string{"to": "scale"}), true},
		{"subscription", h.do("GET", "/api/billing/subscription", tok, nil), true},
		{"api error", h.do("GET", "/api/billing/subscription", "", nil), true},
		{"mcp", h.mcpPost("", h.mcpUser("cache", "alice"), initializeRequest), true},
		{"mcp 401", h.mcpPost("", "", initializeRequest), true},
		{"health", h.do("GET", "/healthz", "", nil), false},
		{"not found", h.offSpec().do("GET", "/nope", "", nil), false},
	} {
		if c.r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", c.name)
		}
		if got := c.r.Header.Get("Cache-Control"); c.noStore && got != "no-store" {
			t.Errorf("%s: Cache-Control %q", c.name, got)
		}
	}
}

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

package integration

import (
	"net/http"
	"strings"
	"testing"
)

// The MCP session is not what makes a confirmation valid: the token is bound
// to the org and principal in PostgreSQL, so it is redeemable in another
// session, on another replica and over REST, by the same principal only.
// Sessions exist on protocol 2025-11-25, so the session tests use it.

func TestMCPConfirmationAfterReconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("recon", "Recon", "pro")
	tok := h.mcpUser("recon", "alice")

	first := mcpConnect(t, h.url, tok, protocol20251125)
	var p proposal
	wantSuccess(t, callTool(t, first, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := mcpConnect(t, h.url, tok, protocol20251125)
	if second.ID() == first.ID() {
		t.Fatal("reconnect reused the session")
	}
	var done executed
	wantSuccess(t, callTool(t, second, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
	if done.Subscription.Plan != "scale" {
		t.Fatalf("after reconnect: %+v", done)
	}
}

func TestMCPConfirmationOverREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("cross", "Cross", "free")
	cs := mcpConnect(t, h.url, h.mcpUser("cross", "alice"), "")
	rest := h.user("cross", "alice")

	t.Run("issued over MCP, confirmed over REST", func(t *testing.T) {
		var p proposal
		wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "pro"}), &p)
		wantStatus(t, h.confirm(h.user("cross", "bob"), "upgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
		wantStatus(t, h.confirm(rest, "upgrade", "pro", p.ConfirmToken), http.StatusOK, "")
	})
	t.Run("issued over REST, confirmed over MCP", func(t *testing.T) {
		p := h.propose(rest, "upgrade", "scale")
		var done executed
		wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
		if done.Subscription.Plan != "scale" {
			t.Fatalf("after MCP confirm: %+v", done)
		}
	})
	if sub := h.subscription(rest); sub != "scale" {
		t.Fatalf("plan %s", sub)
	}
}

func TestMCPConfirmationOnAnotherReplica(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("multi", "Multi", "pro")
	tok := h.mcpUser("multi", "alice")
	other := h.replica()

	onFirst := mcpConnect(t, h.url, tok, protocol20251125)
	var p proposal
	wantSuccess(t, callTool(t, onFirst, "upgrade_plan", map[string]any{"to": "scale"}), &p)

	// Sessions live in the process that opened them...
	r := postWithSession(t, other.url, tok, onFirst.ID())
	if r.StatusCode != http.StatusNotFound {
		t.Fatalf("replica knew the first replica's session: %d", r.StatusCode)
	}
	// ...confirmations in the database.
	onSecond := mcpConnect(t, other.url, tok, "")
	var done executed
	wantSuccess(t, callTool(t, onSecond, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
	if done.Subscription.Plan != "scale" || mcpPlan(t, onFirst) != "scale" {
		t.Fatalf("after confirming on the second replica: %+v", done)
	}
	var again executed
	wantSuccess(t, callTool(t, onFirst, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &again)
	if !again.Replayed {
		t.Fatalf("repeated on the first replica: %+v", again)
	}
}

func postWithSession(t *testing.T, baseURL, token, session string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", baseURL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/mcp"
)

// Who may answer what over MCP (issue 23, items 7–10): the app-only tool
// only from a client that renders the view; a request state only from the
// client, protocol and capability it was issued to; a late answer from
// billing's record; a session only by the org, principal and client that
// opened it. Real clients: the Go SDK's, on both protocol versions.

// TestMCPAppsConfirmNeedsTheView: confirm_plan_change is the view's Confirm
// button. A client that did not declare MCP Apps (at initialize on
// 2025-11-25, in the request on 2026-07-28) has no view, so its call is a
// tool error, nothing executes and its token stays redeemable; a
// 2025-11-25 session cannot declare the extension in one call's _meta
// either. A client with the view gets a result that claims no more than
// billingd saw.
func TestMCPAppsConfirmNeedsTheView(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	claimView := sdk.Meta{"io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{appsExtension: map[string]any{"mimeTypes": []string{viewMIMEType}}}}}
	cases := []struct {
		name    string
		version string
		meta    sdk.Meta // the confirm_plan_change call's _meta
	}{
		{"2025-11-25", protocol20251125, nil},
		{"2026-07-28", protocol20260728, nil},
		{"2025-11-25, the view claimed in the call's _meta", protocol20251125, claimView},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			org := "noview" + string(rune('a'+i))
			acct := h.createOrg(org, "No View", "pro")
			cs := mcpConnect(t, h.url, h.mcpUser(org, "alice"), c.version)
			var p proposal
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
			if !strings.HasPrefix(p.ConfirmToken, "pbc_") {
				t.Fatalf("a client without the view got no token: %+v", p)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "confirm_plan_change", Meta: c.meta,
				Arguments: map[string]any{"confirmation_id": p.ConfirmationID, "confirm_token": p.ConfirmToken}})
			if err != nil {
				t.Fatal(err)
			}
			wantToolError(t, res, "invalid_request")
			if text := strings.Join(texts(res), " "); strings.Contains(text, "pressed") || strings.Contains(text, "Done") {
				t.Fatalf("the refusal claims something billingd did not see: %s", text)
			}
			if plan := mcpPlan(t, cs); plan != "pro" || countEvents(h, org, billing.EventOperationExecuted) != 0 {
				t.Fatalf("confirm_plan_change without a view changed the plan to %s", plan)
			}
			h.wantStripeChanges(acct, 0)
			// Nothing was consumed: the token's owner redeems it the
			// ordinary way.
			var done executed
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
			if !done.OK || done.Replayed || done.Subscription.Plan != "scale" {
				t.Fatalf("second call after the refusal: %+v", done)
			}
			h.wantStripeChanges(acct, 1)
		})
	}
	for i, version := range bothProtocols {
		t.Run(version+", with the view: no claim of a click", func(t *testing.T) {
			org := "view" + string(rune('a'+i))
			h.createOrg(org, "View", "pro")
			cs := appsConnect(t, h.url, h.mcpUser(org, "alice"), version)
			first := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
			token := wantViewProposal(t, first)
			var p proposal
			structured(t, first, &p)
			res := callTool(t, cs, "confirm_plan_change", map[string]any{"confirmation_id": p.ConfirmationID, "confirm_token": token})
			var done executed
			wantSuccess(t, res, &done)
			text := strings.Join(texts(res), " ")
			if done.Subscription.Plan != "scale" || strings.Contains(text, "user pressed") || !strings.Contains(text, "not the click") {
				t.Fatalf("result %+v says %q", done, text)
			}
		})
	}
}

// TestMCPRequestStateBoundToTheAsker: a 2026-07-28 request state issued to
// client agent-a, which declared form elicitation, is answered "accept" by
// everyone else who might hold it: another client of the same person, with
// and without the capability; agent-a itself no longer declaring it, or now
// declaring MCP Apps (which billingd would have asked in its view); and
// 2025-11-25 sessions, which have no multi-round-trip. Each is refused and
// nothing executes; then agent-a's own answer executes the change once.
func TestMCPRequestStateBoundToTheAsker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("MCP_REQUEST_STATE_KEY", "an-integration-test-key-of-enough-bytes"))
	acct := h.createOrg("asker", "Asker", "pro")
	agentA := h.mcpToken("asker", "alice", "agent-a", auth.ScopeRead, auth.ScopeWrite)
	agentB := h.mcpToken("asker", "alice", "agent-b", auth.ScopeRead, auth.ScopeWrite)
	args := map[string]any{"to": "scale"}
	accept := sdk.InputResponseMap{"billingd_consent": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}}
	neverAsked := &host{h: h, token: h.user("asker", "alice"), answer: func(*sdk.ElicitParams) (*sdk.ElicitResult, error) {
		t.Error("a 2025-11-25 answerer was shown a dialog")
		return &sdk.ElicitResult{Action: "decline"}, nil
	}}
	withView := &sdk.ClientCapabilities{Elicitation: formOnly}
	withView.AddExtension(appsExtension, map[string]any{"mimeTypes": []string{viewMIMEType}})

	asked := elicitConnect(t, h.url, agentA, protocol20260728, formOnly, nil, true)
	first := callTool(t, asked, "upgrade_plan", args)
	if !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("first round: needs input %v, state %q", first.NeedsInput(), first.RequestState)
	}
	state := first.RequestState

	answerers := map[string]func(t *testing.T) *sdk.ClientSession{
		"another client of the same person, with forms": func(t *testing.T) *sdk.ClientSession {
			return elicitConnect(t, h.url, agentB, protocol20260728, formOnly, nil, true)
		},
		"another client of the same person, without elicitation": func(t *testing.T) *sdk.ClientSession {
			return elicitConnect(t, h.url, agentB, protocol20260728, nil, nil, true)
		},
		"the asker, no longer declaring forms": func(t *testing.T) *sdk.ClientSession {
			return elicitConnect(t, h.url, agentA, protocol20260728, nil, nil, true)
		},
		"the asker, now declaring MCP Apps": func(t *testing.T) *sdk.ClientSession {
			return mcpConnectWith(t, h.url, agentA, protocol20260728,
				&sdk.ClientOptions{Capabilities: withView, MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true}}, false)
		},
		"a 2025-11-25 session without capabilities": func(t *testing.T) *sdk.ClientSession {
			return elicitConnect(t, h.url, agentA, protocol20251125, nil, nil, true)
		},
		"a 2025-11-25 session with forms": func(t *testing.T) *sdk.ClientSession {
			return elicitConnect(t, h.url, agentA, protocol20251125, formOnly, neverAsked, true)
		},
	}
	for name, connect := range answerers {
		t.Run("refused: "+name, func(t *testing.T) {
			res := nextRoundOf(t, connect(t), args, state, accept)
			wantToolError(t, res, "consent_token_invalid")
			if text := strings.Join(texts(res), " "); strings.Contains(text, "agreed") {
				t.Fatalf("refusal claims consent: %s", text)
			}
			if n := countEvents(h, "asker", billing.EventOperationExecuted); n != 0 {
				t.Fatalf("%d executions after a refused answer", n)
			}
		})
	}
	h.wantStripeChanges(acct, 0)

	var got changeOutcome
	wantSuccess(t, nextRoundOf(t, asked, args, state, accept), &got)
	if got.elicited() != "form:accept" {
		t.Fatalf("the asker's own answer: %+v", got)
	}
	wantOutcome(t, h, "asker", got, true)
	h.wantStripeChanges(acct, 1)
}

// nextRoundOf sends the next round of upgrade_plan: the same arguments, the
// answers and the request state.
func nextRoundOf(t *testing.T, cs *sdk.ClientSession, args map[string]any, state string, answers sdk.InputResponseMap) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "upgrade_plan", Arguments: args, InputResponses: answers, RequestState: state})
	if err != nil {
		t.Fatalf("next round: %v", err)
	}
	return res
}

// TestMCPRequestStateAfterItsWindow: CONFIRM_TTL=2s; a round sent again
// after the request state's window (the confirmation's expiry plus 5
// minutes; played by a replica whose clock reads 305 s later) is answered
// from billing's record of the confirmation: an executed change is
// replayed, one whose outcome was unknown is settled by that round and
// answered, and neither says "nothing was changed". A late answer to a
// question never answered executes nothing and says so.
func TestMCPRequestStateAfterItsWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "2s"),
		withEnv("MCP_REQUEST_STATE_KEY", "an-integration-test-key-of-enough-bytes"),
		// The late round, not the reconciler, settles the unknown outcome,
		// once the lost attempt is certainly over (2 × STRIPE_TIMEOUT).
		withEnv("SETTLE_INTERVAL", "1h"), withEnv("STRIPE_TIMEOUT", "1s"))
	late := h.mcpWithClock(func() time.Time { return time.Now().Add(305 * time.Second) })
	args := map[string]any{"to": "scale"}
	accept := sdk.InputResponseMap{"billingd_consent": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}}
	connect := func(t *testing.T, baseURL, org string) *sdk.ClientSession {
		return elicitConnect(t, baseURL, h.mcpUser(org, "alice"), protocol20260728, formOnly, nil, true)
	}
	firstRound := func(t *testing.T, cs *sdk.ClientSession) string {
		t.Helper()
		res := callTool(t, cs, "upgrade_plan", args)
		if !res.NeedsInput() || res.RequestState == "" {
			t.Fatalf("first round: needs input %v", res.NeedsInput())
		}
		return res.RequestState
	}
	// wantLateAnswer sends the accepted round again, late, and requires the
	// change's outcome: the original result replayed, or (settled now) the
	// result itself.
	wantLateAnswer := func(t *testing.T, org string, acct billing.Account, state string, replayed bool) {
		t.Helper()
		time.Sleep(2500 * time.Millisecond) // the token's TTL has passed by the database's clock too
		cs := connect(t, late, org)
		res := nextRoundOf(t, cs, args, state, accept)
		// An unknown outcome is billing's to settle: until Stripe's answer
		// to the last attempt is certainly in (twice STRIPE_TIMEOUT), the
		// answer is upstream_unavailable, never "nothing was changed".
		for deadline := time.Now().Add(15 * time.Second); res.IsError && time.Now().Before(deadline); {
			if text := strings.Join(texts(res), " "); strings.Contains(strings.ToLower(text), "nothing was changed") {
				t.Fatalf("the late round says nothing was changed: %s", text)
			}
			wantToolError(t, res, "upstream_unavailable")
			time.Sleep(500 * time.Millisecond)
			res = nextRoundOf(t, cs, args, state, accept)
		}
		var again executed
		wantSuccess(t, res, &again)
		if !again.OK || again.Replayed != replayed || again.Subscription.Plan != "scale" {
			t.Fatalf("the late round of an executed change: %+v, want replayed %v", again, replayed)
		}
		if text := strings.Join(texts(res), " "); strings.Contains(strings.ToLower(text), "nothing was changed") {
			t.Fatalf("the late round says nothing was changed: %s", text)
		}
		h.wantStripeChanges(acct, 1)
		if n := countEvents(h, org, billing.EventOperationExecuted); n != 1 {
			t.Fatalf("%d executions", n)
		}
	}

	t.Run("executed", func(t *testing.T) {
		acct := h.createOrg("late-done", "Late", "pro")
		cs := connect(t, h.url, "late-done")
		state := firstRound(t, cs)
		var got changeOutcome
		wantSuccess(t, nextRoundOf(t, cs, args, state, accept), &got)
		wantOutcome(t, h, "late-done", got, true)
		wantLateAnswer(t, "late-done", acct, state, true)
	})
	t.Run("outcome unknown at first", func(t *testing.T) {
		acct := h.createOrg("late-lost", "Late", "pro")
		cs := connect(t, h.url, "late-lost")
		state := firstRound(t, cs)
		h.fake.FailNext(stripepaytest.LoseResponse)
		wantToolError(t, nextRoundOf(t, cs, args, state, accept), "upstream_unavailable")
		wantLateAnswer(t, "late-lost", acct, state, false) // settled now: the result itself
	})
	t.Run("never answered in time", func(t *testing.T) {
		acct := h.createOrg("late-none", "Late", "pro")
		state := firstRound(t, connect(t, h.url, "late-none"))
		res := nextRoundOf(t, connect(t, late, "late-none"), args, state, accept)
		wantToolError(t, res, "consent_token_expired")
		if plan := h.subscription(h.user("late-none", "alice")); plan != "pro" || countEvents(h, "late-none", billing.EventOperationExecuted) != 0 {
			t.Fatalf("a late answer executed: plan %s", plan)
		}
		h.wantStripeChanges(acct, 0)
	})
}

// mcpWithClock serves /mcp of this billingd on a listener of its own, with
// the MCP layer's clock replaced (mcp.Config.Clock): a replica whose clock
// reads what now returns. Database, key and token issuer are shared.
func (h *harness) mcpWithClock(now func() time.Time) string {
	h.t.Helper()
	cfg := h.app.MCPConfig()
	cfg.Clock = now
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.Handler(cfg))
	srv := httptest.NewServer(mux)
	h.t.Cleanup(srv.Close)
	return srv.URL
}

// swappableBearer is a client's credentials that change between requests,
// as when an MCP client's token is replaced under an open session.
type swappableBearer struct{ token atomic.Value }

func (b *swappableBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	return bearer{b.token.Load().(string)}.RoundTrip(r)
}

// TestMCPSessionOwnedByOrgAndPrincipal: a 2025-11-25 session belongs to the
// org, principal and client whose token opened it. The same sub in another
// org, or through another client, is refused on it (403) and never reads
// that org's data through it; a fresh token of the owner (a refresh) keeps
// working. 2026-07-28 has no sessions: each request is its token's alone.
func TestMCPSessionOwnedByOrgAndPrincipal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("own-a", "Own A", "pro")
	h.createOrg("own-b", "Own B", "scale")
	owner := h.mcpToken("own-a", "alice", "agent-a", auth.ScopeRead, auth.ScopeWrite)

	for name, intruder := range map[string]string{
		"the same sub in another org":         h.mcpToken("own-b", "alice", "agent-a", auth.ScopeRead, auth.ScopeWrite),
		"the same sub through another client": h.mcpToken("own-a", "alice", "agent-b", auth.ScopeRead, auth.ScopeWrite),
	} {
		t.Run(name, func(t *testing.T) {
			creds := &swappableBearer{}
			creds.token.Store(owner)
			cs, err := mcpDialVia(h.url, creds, protocol20251125, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			if plan := mcpPlan(t, cs); plan != "pro" {
				t.Fatalf("owner's plan %s", plan)
			}
			creds.token.Store(intruder)
			res, err := callToolErr(cs, "get_subscription", nil)
			if err == nil {
				t.Fatalf("the session answered another owner's token: %v", texts(res))
			}
			if r := postWithSession(t, h.url, intruder, cs.ID()); r.StatusCode != http.StatusForbidden {
				t.Fatalf("another owner's token on the session: %d, want 403", r.StatusCode)
			}
		})
	}
	t.Run("a refreshed token of the owner", func(t *testing.T) {
		cs, creds := dialSwappable(t, h.url, owner, protocol20251125)
		creds.token.Store(h.mcpToken("own-a", "alice", "agent-a", auth.ScopeRead, auth.ScopeWrite))
		if plan := mcpPlan(t, cs); plan != "pro" {
			t.Fatalf("plan %s", plan)
		}
	})
	t.Run("2026-07-28: each request is its own token's", func(t *testing.T) {
		cs, creds := dialSwappable(t, h.url, owner, protocol20260728)
		if cs.ID() != "" {
			t.Fatalf("a 2026-07-28 client got session %q", cs.ID())
		}
		if plan := mcpPlan(t, cs); plan != "pro" {
			t.Fatalf("plan %s", plan)
		}
		creds.token.Store(h.mcpToken("own-b", "alice", "agent-a", auth.ScopeRead, auth.ScopeWrite))
		if plan := mcpPlan(t, cs); plan != "scale" {
			t.Fatalf("org own-b's token read plan %s, want own-b's scale", plan)
		}
	})
}

// dialSwappable connects an MCP client whose bearer token the test can
// swap between requests, starting with token.
func dialSwappable(t *testing.T, baseURL, token, protocol string) (*sdk.ClientSession, *swappableBearer) {
	t.Helper()
	creds := &swappableBearer{}
	creds.token.Store(token)
	cs, err := mcpDialVia(baseURL, creds, protocol, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, creds
}

package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// TestMCPListTools checks the tool list an agent sees: the contract's six
// names, annotations, input schemas from the typed arguments, an output
// schema, and descriptions that teach the two calls.
func TestMCPListTools(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("list", "List", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("list", "alice"), "")
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*sdk.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	if len(tools) != len(billing.Offers())+4 {
		t.Fatalf("tools %v, want one per gated operation, the read tools and cancel_confirmation of contract §7 and §15, "+
			"and confirm_plan_change of §7.1", keysOfTools(tools))
	}
	type want struct {
		readOnly, destructive, idempotent, openWorld bool
		required, optional                           []string
	}
	cases := map[string]want{
		"upgrade_plan":        {destructive: true, openWorld: true, required: []string{"to"}, optional: []string{"confirm_token"}},
		"downgrade_plan":      {destructive: true, openWorld: true, required: []string{"to"}, optional: []string{"confirm_token", "at"}},
		"change_seats":        {destructive: true, openWorld: true, required: []string{"quantity"}, optional: []string{"confirm_token", "at"}},
		"cancel_subscription": {destructive: true, openWorld: true, required: []string{"at"}, optional: []string{"reason", "comment", "confirm_token"}},
		"get_subscription":    {readOnly: true},
		"list_plans":          {readOnly: true},
		"cancel_confirmation": {idempotent: true, required: []string{"confirmation_id"}},
		"confirm_plan_change": {destructive: true, openWorld: true, required: []string{"confirmation_id", "confirm_token"}},
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			tool := tools[name]
			if tool == nil {
				t.Fatalf("no tool %s", name)
			}
			a := tool.Annotations
			switch {
			case a == nil:
				t.Fatal("no annotations")
			case a.ReadOnlyHint != w.readOnly, a.IdempotentHint != w.idempotent:
				t.Fatalf("annotations %+v", a)
			case !w.readOnly && (a.DestructiveHint == nil || *a.DestructiveHint != w.destructive):
				t.Fatalf("destructiveHint %v, want %v", a.DestructiveHint, w.destructive)
			case a.OpenWorldHint == nil || *a.OpenWorldHint != w.openWorld:
				t.Fatalf("openWorldHint %v, want %v", a.OpenWorldHint, w.openWorld)
			}
			wantInputSchema(t, tool.InputSchema, w.required, w.optional)
			var out struct{ Type string }
			remarshal(t, tool.OutputSchema, &out)
			if out.Type != "object" {
				t.Fatalf("output schema %v", tool.OutputSchema)
			}
		})
	}
	for _, name := range []string{"upgrade_plan", "downgrade_plan", "change_seats", "cancel_subscription"} {
		d := tools[name].Description
		for _, phrase := range []string{"NEVER changes anything", "verbatim", "explicitly agrees", "confirm_token"} {
			if !strings.Contains(d, phrase) {
				t.Errorf("%s description lacks %q: %s", name, phrase, d)
			}
		}
	}
}

func keysOfTools(m map[string]*sdk.Tool) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	return names
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
}

// wantInputSchema checks an object schema with exactly these properties, of
// which required are required, and nothing else allowed.
func wantInputSchema(t *testing.T, schema any, required, optional []string) {
	t.Helper()
	var s struct {
		Type                 string
		Properties           map[string]struct{ Type, Description string }
		Required             []string
		AdditionalProperties *json.RawMessage `json:"additionalProperties"`
	}
	remarshal(t, schema, &s)
	if s.Type != "object" || len(s.Properties) != len(required)+len(optional) ||
		strings.Join(s.Required, ",") != strings.Join(required, ",") ||
		s.AdditionalProperties == nil || string(*s.AdditionalProperties) != "false" {
		t.Fatalf("input schema %+v, want required %v, optional %v, no others", s, required, optional)
	}
	for _, p := range append(append([]string(nil), required...), optional...) {
		want := "string"
		if p == "quantity" {
			want = "integer"
		}
		if prop, ok := s.Properties[p]; !ok || prop.Type != want || prop.Description == "" {
			t.Fatalf("property %s: %+v", p, prop)
		}
	}
}

// TestMCPUpgradeHandshake runs both calls over MCP against stripe-mock and
// checks that results have the REST bodies' shape, that the first call
// changes nothing, and that the audit log names the agent.
func TestMCPUpgradeHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("vector", "Vector Build", "pro")
	cs := mcpConnect(t, h.url, h.mcpToken("vector", "alice", "claude-desktop", auth.ScopeRead, auth.ScopeWrite), "")

	var plans struct{ Plans []struct{ ID string } }
	wantSuccess(t, callTool(t, cs, "list_plans", nil), &plans)
	if len(plans.Plans) != 3 || plans.Plans[2].ID != "scale" {
		t.Fatalf("list_plans %+v", plans)
	}
	if plan := mcpPlan(t, cs); plan != "pro" {
		t.Fatalf("plan %s", plan)
	}

	first := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
	var p proposal
	raw := wantSuccess(t, first, &p)
	if keys := keysOf(t, raw); keys != "confirm_required,confirm_token,confirmation_id,details,expires_at,operation,summary,ttl_seconds" {
		t.Fatalf("proposal keys %s", keys)
	}
	if !p.ConfirmRequired || !strings.HasPrefix(p.ConfirmToken, "pbc_") || p.Operation != "upgrade_plan" ||
		!strings.HasPrefix(p.Summary, "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo).") {
		t.Fatalf("proposal %s", raw)
	}
	if tx := texts(first); len(tx) == 0 || tx[0] != p.Summary {
		t.Fatalf("first text block %q, want the summary verbatim", tx)
	}
	if plan := mcpPlan(t, cs); plan != "pro" {
		t.Fatalf("the first call changed the plan to %s", plan)
	}

	second := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken})
	var done executed
	raw = wantSuccess(t, second, &done)
	if keys := keysOf(t, raw); keys != "charged,ok,receipt,subscription" || !done.OK || done.Subscription.Plan != "scale" {
		t.Fatalf("second call %s", raw)
	}
	if sub := h.subscription(h.user("vector", "alice")); sub != "scale" {
		t.Fatalf("REST sees plan %s after the MCP confirm", sub)
	}
	// Repeated (say, after a lost answer): the original result, replayed,
	// not an error that would tell the agent nothing changed.
	var replay executed
	raw = wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &replay)
	if !replay.Replayed || replay.Subscription != done.Subscription {
		t.Fatalf("repeated second call %s", raw)
	}
	wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "pro", "confirm_token": p.ConfirmToken}),
		"consent_token_invalid")

	events := h.auditEvents("vector")
	wantEvents(t, events, "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED", "TOKEN_REJECTED:used")
	for _, e := range events {
		if e.Principal != "alice" || e.Client != "claude-desktop" || e.RequestID == "" {
			t.Fatalf("audit event %+v, want principal alice, client claude-desktop and a request id", e)
		}
	}
}

func mcpPlan(t *testing.T, cs *sdk.ClientSession) string {
	t.Helper()
	var sub struct{ Org, Plan, Status, CurrentPeriodEnd string }
	raw := wantSuccess(t, callTool(t, cs, "get_subscription", nil), &sub)
	if keys := keysOf(t, raw); keys != "cancel_at_period_end,current_period_end,org,plan,quantity,status" || sub.Status == "" {
		t.Fatalf("get_subscription %s", raw)
	}
	return sub.Plan
}

// TestMCPDowngradeHandshake also declines once: cancel_confirmation voids the
// token, and a new first call is needed.
func TestMCPDowngradeHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("acme", "Acme", "scale")
	// client_id instead of azp: the audit log takes either.
	tok, err := h.issuer.Mint(devissuer.Claims{Subject: "bob", Org: "acme", Scopes: []string{auth.ScopeRead, auth.ScopeWrite},
		Audience: []string{h.url + "/mcp"}, Extra: map[string]any{"client_id": "cursor"}})
	if err != nil {
		t.Fatal(err)
	}
	cs := mcpConnect(t, h.url, tok, "")

	var declined proposal
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro"}), &declined)
	var cancelled struct{ ID, Status string }
	raw := wantSuccess(t, callTool(t, cs, "cancel_confirmation", map[string]any{"confirmation_id": declined.ConfirmationID}), &cancelled)
	if keys := keysOf(t, raw); keys != "id,status" || cancelled.ID != declined.ConfirmationID || cancelled.Status != "cancelled" {
		t.Fatalf("cancel %s", raw)
	}
	wantSuccess(t, callTool(t, cs, "cancel_confirmation", map[string]any{"confirmation_id": declined.ConfirmationID}), nil)
	wantToolError(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "confirm_token": declined.ConfirmToken}),
		"consent_token_invalid")

	var p proposal
	first := callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro"})
	wantSuccess(t, first, &p)
	if p.Operation != "downgrade_plan" || !strings.HasPrefix(p.Summary, "Downgrade Acme from Scale ($49/mo) to Pro ($19/mo).") ||
		texts(first)[0] != p.Summary {
		t.Fatalf("proposal %+v", p)
	}
	var done executed
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "confirm_token": p.ConfirmToken}), &done)
	if !done.OK || done.Subscription.Plan != "pro" || mcpPlan(t, cs) != "pro" {
		t.Fatalf("after downgrade: %+v", done)
	}

	var noop executed
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro"}), &noop)
	if !noop.OK || !noop.Noop || noop.ConfirmRequired == nil || *noop.ConfirmRequired {
		t.Fatalf("no-op %+v", noop)
	}
	events := h.auditEvents("acme")
	wantEvents(t, events, "TOKEN_ISSUED", "TOKEN_REVOKED:cancelled", "TOKEN_REJECTED:invalid",
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
	for _, e := range events {
		if e.Client != "cursor" {
			t.Fatalf("audit event %+v, want client cursor", e)
		}
	}
}

// TestMCPToolErrors: every refusal is an isError result with the contract's
// code in structuredContent, and nothing changes.
func TestMCPToolErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("errs", "Errs", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("errs", "erin"), "")
	up := func(args map[string]any) *sdk.CallToolResult { return callTool(t, cs, "upgrade_plan", args) }

	t.Run("invalid token", func(t *testing.T) {
		wantToolError(t, up(map[string]any{"to": "scale", "confirm_token": "pbc_" + strings.Repeat("A", 43)}), "consent_token_invalid")
	})
	t.Run("mismatch", func(t *testing.T) {
		var p proposal
		wantSuccess(t, up(map[string]any{"to": "scale"}), &p)
		wantToolError(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}),
			"consent_token_mismatch")
		wantToolError(t, up(map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), "consent_token_invalid")
	})
	t.Run("token of another principal", func(t *testing.T) {
		var p proposal
		wantSuccess(t, up(map[string]any{"to": "scale"}), &p)
		other := mcpConnect(t, h.url, h.mcpUser("errs", "mallory"), "")
		wantToolError(t, callTool(t, other, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}),
			"consent_token_invalid")
	})
	t.Run("unknown plan", func(t *testing.T) {
		wantToolError(t, up(map[string]any{"to": "gold"}), "unknown_plan")
	})
	t.Run("wrong direction", func(t *testing.T) {
		wantToolError(t, up(map[string]any{"to": "free"}), "invalid_plan_change")
	})
	t.Run("unknown confirmation", func(t *testing.T) {
		wantToolError(t, callTool(t, cs, "cancel_confirmation", map[string]any{"confirmation_id": "nope"}), "not_found")
	})
	t.Run("arguments outside the schema", func(t *testing.T) {
		wantToolError(t, up(map[string]any{"to": "scale", "org": "someone-else"}), "invalid_request")
		wantToolError(t, up(map[string]any{"to": 42}), "invalid_request")
		wantToolError(t, up(map[string]any{}), "invalid_request")
	})
	if plan := mcpPlan(t, cs); plan != "pro" {
		t.Fatalf("plan %s after refusals", plan)
	}
}

// TestMCPExpiredToken: a second call after CONFIRM_TTL is
// consent_token_expired.
func TestMCPExpiredToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "1s"))
	h.createOrg("late", "Late", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("late", "lee"), "")
	var p proposal
	wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	if p.TTLSeconds != 1 {
		t.Fatalf("ttl_seconds %d", p.TTLSeconds)
	}
	time.Sleep(1500 * time.Millisecond)
	res := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken})
	wantToolError(t, res, "consent_token_expired")
	if tx := texts(res)[0]; !strings.Contains(tx, "first call again") {
		t.Fatalf("no next step for the agent in %q", tx)
	}
	if plan := mcpPlan(t, cs); plan != "pro" {
		t.Fatalf("plan %s", plan)
	}
}

// TestMCPAuthorization: billingd's /mcp is an OAuth protected resource (MCP
// authorization spec): 401 with resource metadata for a missing, invalid,
// expired or foreign token, 403 insufficient_scope per tool.
func TestMCPAuthorization(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("authz", "Authz", "pro")
	metadata := h.url + "/.well-known/oauth-protected-resource/mcp"

	t.Run("resource metadata", func(t *testing.T) {
		r := h.do("GET", "/.well-known/oauth-protected-resource/mcp", "", nil)
		var m struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		r.decode(t, &m)
		if r.Status != 200 || m.Resource != h.url+"/mcp" || len(m.AuthorizationServers) != 1 || len(m.ScopesSupported) == 0 {
			t.Fatalf("metadata %d %s", r.Status, r.Body)
		}
	})
	t.Run("no token", func(t *testing.T) {
		r := h.mcpPost("", "", initializeRequest)
		wantChallenge(t, r, http.StatusUnauthorized, `Bearer resource_metadata="`+metadata+`", scope="billing:read billing:write"`)
		if _, err := mcpDial(h.url, "", ""); err == nil {
			t.Fatal("the Go client connected without a token")
		}
	})
	refused := map[string]string{
		"garbage": "not-a-jwt",
		"wrong audience": mint(t, h, devissuer.Claims{Subject: "alice", Org: "authz", Scopes: []string{auth.ScopeRead},
			Audience: []string{"https://other.example/mcp"}}),
		"expired": mint(t, h, devissuer.Claims{Subject: "alice", Org: "authz", Scopes: []string{auth.ScopeRead},
			Audience: []string{h.url + "/mcp"}, TTL: -time.Minute}),
	}
	for name, tok := range refused {
		t.Run(name, func(t *testing.T) {
			r := h.mcpPost("", tok, initializeRequest)
			wantChallenge(t, r, http.StatusUnauthorized,
				`Bearer error="invalid_token", resource_metadata="`+metadata+`", scope="billing:read billing:write"`)
			if strings.Contains(string(r.Body), "audience") || strings.Contains(string(r.Body), "expired") {
				t.Fatalf("401 body tells why: %s", r.Body)
			}
			if _, err := mcpDial(h.url, tok, ""); err == nil {
				t.Fatal("the Go client connected with a refused token")
			}
		})
	}
	t.Run("audience of the REST API also accepted", func(t *testing.T) {
		cs := mcpConnect(t, h.url, h.token("authz", "alice", auth.ScopeRead), "")
		wantSuccess(t, callTool(t, cs, "list_plans", nil), nil)
	})
	t.Run("read-only token calls a write tool", func(t *testing.T) {
		tok := h.mcpToken("authz", "reader", "agent", auth.ScopeRead)
		r := h.mcpPost("", tok, toolCallRequest("upgrade_plan", `{"to":"scale"}`))
		wantChallenge(t, r, http.StatusForbidden,
			`Bearer error="insufficient_scope", scope="billing:read billing:write", resource_metadata="`+metadata+`"`)

		cs := mcpConnect(t, h.url, tok, "")
		wantSuccess(t, callTool(t, cs, "list_plans", nil), nil)
		_, err := callToolErr(cs, "upgrade_plan", map[string]any{"to": "scale"})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || !strings.Contains(rpcErr.Message, "insufficient_scope") ||
			!strings.Contains(string(rpcErr.Data), `"code":"insufficient_scope"`) {
			t.Fatalf("upgrade_plan with a read-only token: %v", err)
		}
		// The refusal answers the call, not the session.
		if plan := mcpPlan(t, cs); plan != "pro" {
			t.Fatalf("plan %s", plan)
		}
	})
	t.Run("write-only token calls a read tool", func(t *testing.T) {
		tok := h.mcpToken("authz", "writer", "agent", auth.ScopeWrite)
		r := h.mcpPost("", tok, toolCallRequest("get_subscription", `{}`))
		wantChallenge(t, r, http.StatusForbidden,
			`Bearer error="insufficient_scope", scope="billing:read billing:write", resource_metadata="`+metadata+`"`)
		r = h.mcpPost("", tok, `[`+toolCallRequest("list_plans", `{}`)+`]`)
		wantChallenge(t, r, http.StatusForbidden,
			`Bearer error="insufficient_scope", scope="billing:read billing:write", resource_metadata="`+metadata+`"`)
		cs := mcpConnect(t, h.url, tok, "")
		var p proposal
		wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	})
	t.Run("admin only", func(t *testing.T) {
		tok := h.mcpToken("authz", "root", "agent", auth.ScopeAdmin)
		r := h.mcpPost("", tok, toolCallRequest("cancel_confirmation", `{"confirmation_id":"x"}`))
		wantChallenge(t, r, http.StatusForbidden,
			`Bearer error="insufficient_scope", scope="billing:write billing:admin", resource_metadata="`+metadata+`"`)
	})
	t.Run("session of another principal", func(t *testing.T) {
		cs := mcpConnect(t, h.url, h.mcpUser("authz", "alice"), protocol20251125) // 2026-07-28 has no sessions
		if r := postWithSession(t, h.url, h.mcpUser("authz", "mallory"), cs.ID()); r.StatusCode != http.StatusForbidden {
			t.Fatalf("another principal used alice's session: %d", r.StatusCode)
		}
	})
}

func mint(t *testing.T, h *harness, c devissuer.Claims) string {
	t.Helper()
	tok, err := h.issuer.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func wantChallenge(t *testing.T, r response, status int, challenge string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if got := r.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != challenge {
		t.Fatalf("WWW-Authenticate %q\nwant %q", got, challenge)
	}
}

// TestMCPProtocolVersions: a client on 2025-11-25 (the npm SDK's) and one
// on 2026-07-28 (the Go SDK's latest) both get the version they ask for and
// complete the handshake: /mcp serves the older protocol with sessions and
// the newer one statelessly, without a session id.
func TestMCPProtocolVersions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for i, version := range []string{protocol20251125, protocol20260728} {
		t.Run(version, func(t *testing.T) {
			org := []string{"old", "new"}[i]
			h.createOrg(org, "Org "+org, "free")
			cs := mcpConnect(t, h.url, h.mcpUser(org, "alice"), version)
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s", got)
			}
			if hasSession := cs.ID() != ""; hasSession != (version == protocol20251125) {
				t.Fatalf("session id %q on %s", cs.ID(), version)
			}
			var p proposal
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "pro"}), &p)
			var done executed
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "pro", "confirm_token": p.ConfirmToken}), &done)
			if done.Subscription.Plan != "pro" {
				t.Fatalf("second call %+v", done)
			}
		})
	}
}

// TestMCPDNSRebinding: a loopback listener refuses a foreign Host, except the
// host of PUBLIC_BASE_URL, which a same-host reverse proxy forwards.
func TestMCPDNSRebinding(t *testing.T) {
	t.Parallel()
	t.Run("loopback deployment", func(t *testing.T) {
		h := newHarness(t)
		h.createOrg("dns", "DNS", "pro")
		if r := h.mcpPost("attacker.example", h.mcpUser("dns", "alice"), initializeRequest); r.Status != http.StatusForbidden {
			t.Fatalf("foreign Host: %d %s", r.Status, r.Body)
		}
		if r := h.mcpPost("", h.mcpUser("dns", "alice"), initializeRequest); r.Status != http.StatusOK {
			t.Fatalf("loopback Host: %d %s", r.Status, r.Body)
		}
	})
	t.Run("behind a reverse proxy", func(t *testing.T) {
		public := "https://billing.example.test"
		h := newHarness(t, withEnv("PUBLIC_BASE_URL", public))
		h.createOrg("proxy", "Proxy", "pro")
		tok := mint(t, h, devissuer.Claims{Subject: "alice", Org: "proxy", Scopes: []string{auth.ScopeRead},
			Audience: []string{public + "/mcp"}})
		if r := h.mcpPost("billing.example.test", tok, initializeRequest); r.Status != http.StatusOK {
			t.Fatalf("public Host: %d %s", r.Status, r.Body)
		}
		if r := h.mcpPost("attacker.example", tok, initializeRequest); r.Status != http.StatusForbidden {
			t.Fatalf("foreign Host: %d %s", r.Status, r.Body)
		}
		r := h.mcpPost("billing.example.test", "", initializeRequest)
		wantChallenge(t, r, http.StatusUnauthorized,
			`Bearer resource_metadata="`+public+`/.well-known/oauth-protected-resource/mcp", scope="billing:read billing:write"`)
	})
}

// TestMCPRateLimited: the service's rate limit reaches an agent as an isError
// result whose text carries REST's Retry-After.
func TestMCPRateLimited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_PROPOSALS", "2"), withEnv("RATE_LIMIT_WINDOW", "1m"))
	h.createOrg("busy", "Busy", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("busy", "bea"), "")
	for range 2 {
		wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), nil)
	}
	res := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
	wantToolError(t, res, "rate_limited")
	if tx := texts(res)[0]; !strings.Contains(tx, "Retry after ") {
		t.Fatalf("no retry hint in %q", tx)
	}
}

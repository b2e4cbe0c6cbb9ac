package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// MCP Apps (contract §7.1), seen by the Go SDK's client.

const (
	appsExtension = "io.modelcontextprotocol/ui"
	viewMIMEType  = "text/html;profile=mcp-app"
	viewURI       = "ui://billingd/plan-change.html"
	tokenMetaKey  = "billingd/confirm_token"
	statusMetaKey = "billingd/confirmation_status"
)

// appsConnect connects as token on version, advertising the MCP Apps
// extension with HTML views, as a chat host that renders them does.
func appsConnect(t *testing.T, baseURL, token, version string) *sdk.ClientSession {
	t.Helper()
	return appsConnectWith(t, baseURL, token, version, nil)
}

// appsConnectWith also advertises form elicitation, answered by o, when o is
// not nil.
func appsConnectWith(t *testing.T, baseURL, token, version string, o *host) *sdk.ClientSession {
	t.Helper()
	caps := &sdk.ClientCapabilities{}
	caps.AddExtension(appsExtension, map[string]any{"mimeTypes": []string{viewMIMEType}})
	opts := &sdk.ClientOptions{Capabilities: caps}
	if o != nil {
		caps.Elicitation = formOnly
		opts.ElicitationHandler = o.elicit
	}
	return mcpConnectWith(t, baseURL, token, version, opts, false)
}

// TestMCPAppsTools: the plan tools link the view, confirm_plan_change is
// app-only, and the view is a self-contained HTML resource with an empty CSP
// allow-list.
func TestMCPAppsTools(t *testing.T) {
	h := newHarness(t)
	h.createOrg("apps-list", "Apps List", "pro")
	cs := appsConnect(t, h.url, h.mcpUser("apps-list", "alice"), "")
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*sdk.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	var ui struct {
		UI struct {
			ResourceURI string   `json:"resourceUri"`
			Visibility  []string `json:"visibility"`
		} `json:"ui"`
	}
	for _, name := range []string{"upgrade_plan", "downgrade_plan"} {
		remarshal(t, tools[name].Meta, &ui)
		if ui.UI.ResourceURI != viewURI || ui.UI.Visibility != nil {
			t.Errorf("%s _meta %v, want ui.resourceUri %s", name, tools[name].Meta, viewURI)
		}
		if d := tools[name].Description; !strings.Contains(d, "do not ask the user for a token") {
			t.Errorf("%s description does not tell an Apps client's agent what to do: %s", name, d)
		}
	}
	confirm := tools["confirm_plan_change"]
	if confirm == nil {
		t.Fatal("no confirm_plan_change")
	}
	ui.UI.Visibility = nil
	remarshal(t, confirm.Meta, &ui)
	if !slices.Equal(ui.UI.Visibility, []string{"app"}) {
		t.Fatalf("confirm_plan_change _meta %v, want ui.visibility [app]", confirm.Meta)
	}
	wantInputSchema(t, confirm.InputSchema, []string{"confirmation_id", "confirm_token"}, nil)

	read, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: viewURI})
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Contents) != 1 {
		t.Fatalf("%d contents", len(read.Contents))
	}
	c := read.Contents[0]
	if c.URI != viewURI || c.MIMEType != viewMIMEType || !strings.HasPrefix(c.Text, "<!doctype html>") ||
		!strings.Contains(c.Text, "confirm_plan_change") {
		t.Fatalf("view %s %s %.80q", c.URI, c.MIMEType, c.Text)
	}
	var meta struct {
		UI struct {
			CSP map[string][]string `json:"csp"`
		} `json:"ui"`
	}
	remarshal(t, c.Meta, &meta)
	for _, k := range []string{"connectDomains", "resourceDomains", "frameDomains", "baseUriDomains"} {
		if list, ok := meta.UI.CSP[k]; !ok || len(list) != 0 {
			t.Fatalf("view _meta %v: want ui.csp.%s declared empty", c.Meta, k)
		}
	}
	list, err := cs.ListResources(t.Context(), nil)
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != viewURI || list.Resources[0].MIMEType != viewMIMEType {
		t.Fatalf("resources/list %+v, %v", list, err)
	}
}

// TestMCPAppsHandshake: for a client that advertised the extension, on
// either protocol, the first call holds the summary, the confirmation id and
// the expiry but no token anywhere the model reads; the token is in _meta,
// and confirm_plan_change with it executes the change once (again: a replay).
func TestMCPAppsHandshake(t *testing.T) {
	h := newHarness(t)
	for i, version := range bothProtocols {
		t.Run(version, func(t *testing.T) {
			org := []string{"apps-a", "apps-b"}[i]
			acct := h.createOrg(org, "Apps Org", "pro")
			cs := appsConnect(t, h.url, h.mcpUser(org, "alice"), version)

			first := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
			token := wantViewProposal(t, first)
			var p proposal
			structured(t, first, &p)
			if !strings.HasPrefix(p.Summary, "Upgrade Apps Org from Pro ($19/mo) to Scale ($49/mo).") || p.ConfirmationID == "" {
				t.Fatalf("proposal %+v", p)
			}
			if plan := mcpPlan(t, cs); plan != "pro" {
				t.Fatalf("the first call changed the plan to %s", plan)
			}

			second := callTool(t, cs, "confirm_plan_change", map[string]any{"confirmation_id": p.ConfirmationID, "confirm_token": token})
			var done executed
			wantSuccess(t, second, &done)
			if !done.OK || done.Subscription.Plan != "scale" {
				t.Fatalf("confirm_plan_change %+v", done)
			}
			h.wantStripeChanges(acct, 1)
			// The person pressed Confirm in billingd's own view.
			h.wantConsent(org, p.ConfirmationID, billing.ConsentMCPAppView, billing.HumanAttested)
			// Pressed again (a lost answer, a double click): the replay of
			// contract §6, nothing runs twice.
			var replay struct {
				OK       bool `json:"ok"`
				Replayed bool `json:"replayed"`
			}
			wantSuccess(t, callTool(t, cs, "confirm_plan_change", map[string]any{"confirmation_id": p.ConfirmationID, "confirm_token": token}), &replay)
			if !replay.OK || !replay.Replayed {
				t.Fatalf("confirm_plan_change again: %+v, want a replay", replay)
			}
			h.wantStripeChanges(acct, 1)
		})
	}
}

// wantViewProposal requires a first call's result for the view: no token in
// content or structuredContent, the summary, id and expiry there, and the
// token in _meta. It returns the token.
func wantViewProposal(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	raw := wantSuccess(t, res, nil)
	content, err := json.Marshal(res.Content)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "pbc_") || strings.Contains(string(content), "pbc_") {
		t.Fatalf("a token reached what the model reads:\n%s\n%s", raw, content)
	}
	if keys := keysOf(t, raw); keys != "confirm_required,confirmation_id,details,expires_at,operation,summary,ttl_seconds" {
		t.Fatalf("proposal keys %s", keys)
	}
	token, _ := res.Meta[tokenMetaKey].(string)
	if !strings.HasPrefix(token, "pbc_") {
		t.Fatalf("_meta %v: want the token under %s", res.Meta, tokenMetaKey)
	}
	return token
}

// TestMCPAppsWithoutExtension: a client that did not advertise the
// extension gets the handshake of contract §6, token included, and no token
// in _meta.
func TestMCPAppsWithoutExtension(t *testing.T) {
	h := newHarness(t)
	h.createOrg("apps-none", "None", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("apps-none", "alice"), "")
	first := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
	var p proposal
	raw := wantSuccess(t, first, &p)
	if keys := keysOf(t, raw); keys != "confirm_required,confirm_token,confirmation_id,details,expires_at,operation,summary,ttl_seconds" ||
		!strings.HasPrefix(p.ConfirmToken, "pbc_") {
		t.Fatalf("proposal %s", raw)
	}
	if _, ok := first.Meta[tokenMetaKey]; ok {
		t.Fatalf("_meta %v for a client without the extension", first.Meta)
	}
	if tx := texts(first); tx[0] != p.Summary {
		t.Fatalf("first text block %q, want the summary verbatim", tx[0])
	}
}

// TestMCPAppsRefusals: a superseded confirmation says so to the view; an id
// of another principal is refused like an unknown token and stays valid for
// its owner; a cancelled one says so too.
func TestMCPAppsRefusals(t *testing.T) {
	h := newHarness(t)
	acct := h.createOrg("apps-refuse", "Refuse", "pro")
	alice := appsConnect(t, h.url, h.mcpUser("apps-refuse", "alice"), "")
	bob := appsConnect(t, h.url, h.mcpUser("apps-refuse", "bob"), "")

	old := callTool(t, alice, "upgrade_plan", map[string]any{"to": "scale"})
	oldToken := wantViewProposal(t, old)
	var oldP proposal
	structured(t, old, &oldP)
	newer := callTool(t, alice, "upgrade_plan", map[string]any{"to": "scale"})
	newToken := wantViewProposal(t, newer)
	var newP proposal
	structured(t, newer, &newP)

	res := callTool(t, alice, "confirm_plan_change", map[string]any{"confirmation_id": oldP.ConfirmationID, "confirm_token": oldToken})
	wantToolError(t, res, "consent_token_invalid")
	if res.Meta[statusMetaKey] != "superseded" {
		t.Fatalf("_meta %v, want %s superseded", res.Meta, statusMetaKey)
	}

	wantToolError(t, callTool(t, bob, "confirm_plan_change", map[string]any{"confirmation_id": newP.ConfirmationID, "confirm_token": newToken}),
		"consent_token_invalid")
	wantToolError(t, callTool(t, alice, "confirm_plan_change", map[string]any{"confirmation_id": "cfm_nope", "confirm_token": newToken}),
		"consent_token_invalid")
	h.wantStripeChanges(acct, 0)

	wantSuccess(t, callTool(t, alice, "cancel_confirmation", map[string]any{"confirmation_id": newP.ConfirmationID}), nil)
	res = callTool(t, alice, "confirm_plan_change", map[string]any{"confirmation_id": newP.ConfirmationID, "confirm_token": newToken})
	wantToolError(t, res, "consent_token_invalid")
	if res.Meta[statusMetaKey] != "cancelled" {
		t.Fatalf("_meta %v, want %s cancelled", res.Meta, statusMetaKey)
	}
	h.wantStripeChanges(acct, 0)
}

// TestMCPAppsBeforeElicitation: a client that renders MCP Apps and could
// also show a form gets the view, not a dialog: billingd's own rendering of
// the terms, and one way to agree.
func TestMCPAppsBeforeElicitation(t *testing.T) {
	h := newHarness(t)
	h.createOrg("apps-form", "Form", "pro")
	o := &host{h: h, token: h.user("apps-form", "alice"), answer: answerWith("accept", map[string]any{"confirm": true})}
	cs := appsConnectWith(t, h.url, h.mcpUser("apps-form", "alice"), protocol20251125, o)
	wantViewProposal(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}))
	if n := o.dialogs(); n != 0 {
		t.Fatalf("the client was shown %d dialogs as well as the view", n)
	}
	if plan := mcpPlan(t, cs); plan != "pro" {
		t.Fatalf("plan %s after a first call", plan)
	}
}

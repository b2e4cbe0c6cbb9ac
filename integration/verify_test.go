package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// verifyEverything is a policy under which every change needs the verify
// level.
const verifyEverything = `{"rules":[{"name":"prove it is you","action":"verify"}]}`

// verifyProposal is a first call's body under the verify level.
type verifyProposal struct {
	proposal
	VerificationRequired bool   `json:"verification_required"`
	VerifyURL            string `json:"verify_url"`
}

// proposeVerify makes a first call that must need verification.
func (h *harness) proposeVerify(token, op, to string) verifyProposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, `{"to":"`+to+`"}`)
	wantStatus(h.t, r, http.StatusAccepted, "")
	var p verifyProposal
	r.decode(h.t, &p)
	if !p.VerificationRequired || p.VerifyURL != h.url+"/verify/"+p.ConfirmationID {
		h.t.Fatalf("no verification asked: %s", r.Body)
	}
	return p
}

// stepUpToken is principal's access token (client test-agent) whose
// auth_time and acr say how the person last signed in; a zero authTime
// leaves auth_time out.
func (h *harness) stepUpToken(org, principal string, authTime time.Time, acr string) string {
	h.t.Helper()
	extra := map[string]any{}
	if !authTime.IsZero() {
		extra["auth_time"] = authTime.Unix()
	}
	if acr != "" {
		extra["acr"] = acr
	}
	return mint(h.t, h, devissuer.Claims{Subject: principal, Org: org, Client: "test-agent",
		Scopes: []string{auth.ScopeRead, auth.ScopeWrite}, Audience: []string{h.url, h.url + "/mcp"}, Extra: extra})
}

// TestVerifyStepUpREST: under verify, the second call executes only with an
// access token of the same person whose auth_time is at or after the
// proposal (RFC 9470). A stale or missing auth_time gets 401
// insufficient_user_authentication with max_age=0 and the verify_url; a
// fresh token of another person is not the owner's (consent_token_invalid);
// the token stays redeemable by its owner throughout.
func TestVerifyStepUpREST(t *testing.T) {
	h := newHarness(t)
	h.createOrg("ver", "Ver", "pro")
	h.setPolicy("ver", verifyEverything)
	agent := h.stepUpToken("ver", "vera", time.Now().Add(-10*time.Minute), "")
	p := h.proposeVerify(agent, "upgrade", "scale")

	challenge := `Bearer error="insufficient_user_authentication", ` +
		`error_description="the person who asked must sign in again; or confirm at the verify_url", max_age=0, ` +
		`resource_metadata="` + h.url + `/.well-known/oauth-protected-resource"`
	for name, tok := range map[string]string{
		"stale auth_time":   agent,
		"missing auth_time": h.stepUpToken("ver", "vera", time.Time{}, ""),
	} {
		t.Run(name, func(t *testing.T) {
			r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
			wantChallenge(t, r, http.StatusUnauthorized, challenge)
			wantStatus(t, r, http.StatusUnauthorized, "insufficient_user_authentication")
			if !strings.Contains(string(r.Body), p.VerifyURL) {
				t.Fatalf("the answer does not give the verify_url: %s", r.Body)
			}
		})
	}
	other := h.stepUpToken("ver", "mallory", time.Now(), "")
	wantStatus(t, h.confirm(other, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	if plan := h.subscription(agent); plan != "pro" {
		t.Fatalf("plan %s before verification", plan)
	}

	fresh := h.stepUpToken("ver", "vera", time.Now(), "")
	wantStatus(t, h.confirm(fresh, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	if plan := h.subscription(agent); plan != "scale" {
		t.Fatalf("plan %s after the step-up", plan)
	}
	names := strings.Join(eventNames(h.auditEvents("ver")), " ")
	if !strings.Contains(names, "USER_VERIFIED:step_up TOKEN_VALIDATED OPERATION_EXECUTED") {
		t.Fatalf("audit: %s", names)
	}
}

// TestVerifyStepUpACR: with VERIFY_ACR_VALUES, a fresh token must also
// carry one of those acr values, and the challenge names them.
func TestVerifyStepUpACR(t *testing.T) {
	h := newHarness(t, withEnv("VERIFY_ACR_VALUES", "urn:test:passkey,urn:test:hwk"))
	h.createOrg("acr", "Acr", "pro")
	h.setPolicy("acr", verifyEverything)
	p := h.proposeVerify(h.stepUpToken("acr", "ann", time.Time{}, ""), "upgrade", "scale")

	for name, acr := range map[string]string{"no acr": "", "weak acr": "urn:test:password"} {
		t.Run(name, func(t *testing.T) {
			r := h.confirm(h.stepUpToken("acr", "ann", time.Now(), acr), "upgrade", "scale", p.ConfirmToken)
			wantStatus(t, r, http.StatusUnauthorized, "insufficient_user_authentication")
			if got := r.Header.Get("WWW-Authenticate"); !strings.Contains(got, `max_age=0, acr_values="urn:test:passkey urn:test:hwk"`) {
				t.Fatalf("challenge %q", got)
			}
		})
	}
	r := h.confirm(h.stepUpToken("acr", "ann", time.Now(), "urn:test:hwk"), "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
}

// TestVerifyOverMCP: over MCP with the Go SDK client, the first call's
// proposal carries verification_required and verify_url; the agent's
// second call is a tool error insufficient_user_authentication whose
// message gives the verify_url; a step-up token with a fresh auth_time
// executes. The tool descriptions tell the agent so.
func TestVerifyOverMCP(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mver", "MCP Verify", "pro")
	h.setPolicy("mver", verifyEverything)
	stale := h.stepUpToken("mver", "vera", time.Now().Add(-time.Hour), "")
	cs := mcpConnect(t, h.url, stale, "")

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if (tool.Name == "upgrade_plan" || tool.Name == "downgrade_plan") &&
			(!strings.Contains(tool.Description, "verification_required") || !strings.Contains(tool.Description, "insufficient_user_authentication")) {
			t.Errorf("%s does not explain the verify level: %s", tool.Name, tool.Description)
		}
		if strings.Contains(tool.Name, "approve") {
			t.Errorf("an approval tool over MCP: %s", tool.Name)
		}
	}

	var p verifyProposal
	wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	if !p.VerificationRequired || p.VerifyURL != h.url+"/verify/"+p.ConfirmationID {
		t.Fatalf("proposal %+v", p)
	}
	refused := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken})
	wantToolError(t, refused, "insufficient_user_authentication")
	if tx := texts(refused); !strings.Contains(tx[0], p.VerifyURL) {
		t.Fatalf("the tool error does not give the verify_url: %q", tx)
	}
	if plan := h.subscription(h.user("mver", "vera")); plan != "pro" {
		t.Fatalf("plan %s before verification", plan)
	}

	fresh := mcpConnect(t, h.url, h.stepUpToken("mver", "vera", time.Now(), ""), "")
	var done executed
	wantSuccess(t, callTool(t, fresh, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
	if !done.OK || done.Subscription.Plan != "scale" {
		t.Fatalf("step-up over MCP: %+v", done)
	}
}

// TestMCPElicitationVerify: under verify, a client that can open URLs is
// sent to the verification page (URL-mode elicitation, never a form: a
// click in the agent's client proves nothing); the agent's second call is
// refused until the person confirmed there, then executes.
func TestMCPElicitationVerify(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mev", "Mev", "pro")
	h.setPolicy("mev", verifyEverything)
	o := &host{h: h, token: h.user("mev", "vera"), answer: answerWith("accept", nil)}
	cs := elicitConnect(t, h.url, h.mcpUser("mev", "vera"), bothProtocols[0], formAndURL, o, false)

	var p changeOutcome
	raw := wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	dialog, _ := o.dialog(t)
	wantURL := h.url + "/verify/" + p.ConfirmationID
	if dialog.Mode != "url" || dialog.URL != wantURL || !p.VerificationRequired || p.VerifyURL != wantURL || p.ConfirmToken == "" {
		t.Fatalf("dialog %+v, first call %s", dialog, raw)
	}
	second := map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}
	wantToolError(t, callTool(t, cs, "upgrade_plan", second), "insufficient_user_authentication")

	// What the page records once vera signed in afresh and pressed Confirm
	// (the page itself: TestVerifyPageInBrowser).
	vera := billing.Person{Subject: "vera", Org: "mev", Auth: billing.Authentication{AuthTime: time.Now()}}
	if _, err := h.app.Service.Verify(t.Context(), vera, p.ConfirmationID, true); err != nil {
		t.Fatal(err)
	}
	var done changeOutcome
	wantSuccess(t, callTool(t, cs, "upgrade_plan", second), &done)
	if !done.OK || done.Subscription == nil || done.Subscription.Plan != "scale" {
		t.Fatalf("after verification: %+v", done)
	}
}

// TestVerifyPageHeaders: the verification page is served with the security
// headers of billingd's pages (no script at all, never framed, never
// cached), and a path that is no confirmation id is answered without any
// lookup.
func TestVerifyPageHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.do("GET", "/verify/not-a-confirmation", "", nil)
	hd := r.Header
	if csp := hd.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("X-Frame-Options") != "DENY" ||
		hd.Get("Referrer-Policy") != "no-referrer" || hd.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", hd)
	}
	if !strings.Contains(string(r.Body), "does not name a plan change") {
		t.Errorf("a malformed id got %d %.300s", r.Status, r.Body)
	}
}

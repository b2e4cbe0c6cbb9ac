package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// setPolicy replaces the org's policy as an admin and requires success.
func (h *harness) setPolicy(org, policy string) {
	h.t.Helper()
	r := h.do("PUT", "/api/billing/policy", h.admin(org, "policy-admin"), policy)
	wantStatus(h.t, r, http.StatusOK, "")
}

func TestPolicyAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("pol", "Pol", "pro")
	admin := h.admin("pol", "ada")
	r := h.do("GET", "/api/billing/policy", admin, nil)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"rules":[]`) {
		t.Fatalf("default policy: %s", r.Body)
	}
	wantStatus(t, h.do("GET", "/api/billing/policy", h.user("pol", "ursula"), nil), http.StatusForbidden, "insufficient_scope")
	wantStatus(t, h.do("PUT", "/api/billing/policy", h.user("pol", "ursula"), `{"rules":[]}`), http.StatusForbidden, "insufficient_scope")

	for name, body := range map[string]string{
		"unknown action":     `{"rules":[{"name":"big","action":"maybe"}]}`,
		"unknown plan":       `{"rules":[{"name":"big","to_plans":["gold"],"action":"deny"}]}`,
		"negative amount":    `{"rules":[{"name":"big","amount_due_above_cents":-1,"action":"approve"}]}`,
		"bad caller":         `{"rules":[{"name":"big","caller":"robot","action":"approve"}]}`,
		"unknown field":      `{"rules":[{"name":"x","action":"deny","when":{}}]}`,
		"long window":        `{"rules":[],"approval_window_seconds":901}`,
		"duplicate name":     `{"rules":[{"name":"a","action":"deny"},{"name":"a","action":"allow"}]}`,
		"bad operation":      `{"rules":[{"name":"big","operation":"delete_org","action":"deny"}]}`,
		"negative day limit": `{"rules":[],"daily_limit":-1}`,
		"unknown danger":     `{"rules":[{"name":"big","danger":["maybe"],"action":"deny"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := h.offSpec().do("PUT", "/api/billing/policy", admin, body) // invalid on purpose
			wantStatus(t, r, http.StatusBadRequest, "invalid_request")
			// The message names the field by its place, never by what the
			// client wrote in it.
			if strings.Contains(body, `"name":"big"`) && !strings.Contains(string(r.Body), `rules[0]`) {
				t.Fatalf("message does not name the rule: %s", r.Body)
			}
			for _, echoed := range []string{"big", "gold", "robot", "delete_org", "maybe"} {
				if strings.Contains(string(r.Body), echoed) {
					t.Fatalf("message echoes the client's %q: %s", echoed, r.Body)
				}
			}
		})
	}
	policy := `{"rules":[{"name":"no scale","to_plans":["scale"],"action":"deny"}],"daily_limit":3,"approval_window_seconds":300,"agent_clients":["bot"]}`
	h.setPolicy("pol", policy)
	r = h.do("GET", "/api/billing/policy", admin, nil)
	if !strings.Contains(string(r.Body), `"name":"no scale"`) || !strings.Contains(string(r.Body), `"daily_limit":3`) {
		t.Fatalf("stored policy: %s", r.Body)
	}
	if names := strings.Join(eventNames(h.auditEvents("pol")), " "); !strings.Contains(names, "POLICY_UPDATED") {
		t.Fatalf("policy change not audited: %s", names)
	}
}

func TestPolicyDeny(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("den", "Den", "pro")
	h.setPolicy("den", `{"rules":[
		{"name":"downgrades are fine","operation":"downgrade_plan","action":"allow"},
		{"name":"no scale","to_plans":["scale"],"action":"deny"},
		{"name":"everything else is fine","action":"allow"}]}`)
	tok := h.user("den", "dan")
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`), http.StatusForbidden, "operation_denied")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan %s", sub)
	}
	names := strings.Join(eventNames(h.auditEvents("den")), " ")
	if !strings.Contains(names, "OPERATION_DENIED:policy rule no scale") || strings.Contains(names, "TOKEN_ISSUED") {
		t.Fatalf("audit: %s", names)
	}
}

// TestPolicyAllow: allow executes on the first call, but only when nothing
// is due now; a change with a charge still needs the second call.
func TestPolicyAllow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("allow", "Allow", "pro")
	h.setPolicy("allow", `{"rules":[{"name":"trust us","action":"allow"}]}`)
	tok := h.user("allow", "al")

	r := h.do("POST", "/api/billing/downgrade", tok, `{"to":"free"}`)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"ok":true`) || h.subscription(tok) != "free" {
		t.Fatalf("allowed downgrade: %s", r.Body)
	}
	p := h.propose(tok, "upgrade", "scale") // a charge: 202, not executed
	if p.Details.AmountDueNowCents == 0 || h.subscription(tok) != "free" {
		t.Fatalf("an upgrade with %d due ran on the first call", p.Details.AmountDueNowCents)
	}
}

// TestPolicyDanger: every first call says what kind of change it is
// (details.danger), and a rule naming dangers decides on it: here money
// moving now needs a second person, a change at the period's end does not,
// and a deny on what cannot be undone leaves today's operations alone.
func TestPolicyDanger(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("dng", "Danger", "scale")
	h.setPolicy("dng", `{"rules":[
		{"name":"money moves","danger":["charges"],"action":"approve"},
		{"name":"nothing lasting","danger":["irreversible"],"action":"deny"}]}`)
	tok := h.user("dng", "dee")
	if p := h.proposeApprovalOf(tok, "downgrade", "pro"); p.Details.Danger != billing.DangerCharges {
		t.Fatalf("a downgrade now: danger %q", p.Details.Danger)
	}
	r := h.do("POST", "/api/billing/downgrade", tok, `{"to":"pro","at":"period_end"}`)
	wantStatus(t, r, http.StatusAccepted, "")
	var p struct {
		proposal
		ApprovalRequired bool `json:"approval_required"`
	}
	r.decode(t, &p)
	if p.Details.Danger != billing.DangerReversible || p.ApprovalRequired {
		t.Fatalf("a downgrade at the period's end: %s", r.Body)
	}
}

// TestApprovalFlow: an approve rule holds the second call until another
// admin of the org approves out of band; the agent cannot approve itself.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "60s"))
	h.createOrg("appr", "Appr", "pro")
	h.createOrg("other", "Other", "pro")
	h.setPolicy("appr", `{"agent_clients":["test-agent"],"approval_window_seconds":600,
		"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
	// Even with admin scope, an agent cannot approve its own request.
	agent := h.token("appr", "agent-principal", auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin)
	p := h.proposeApproval(agent, "scale")
	if p.TTLSeconds != 600 {
		t.Fatalf("ttl %d, want the approval window", p.TTLSeconds)
	}

	r := h.confirm(agent, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusConflict, "approval_pending")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("approval_pending without Retry-After")
	}
	path := "/api/billing/confirmations/" + p.ConfirmationID
	wantStatus(t, h.do("POST", path+"/approve", agent, nil), http.StatusForbidden, "operation_denied")
	wantStatus(t, h.do("POST", path+"/approve", h.admin("other", "boss"), nil), http.StatusNotFound, "not_found")
	wantStatus(t, h.do("POST", path+"/approve", h.user("appr", "clerk"), nil), http.StatusForbidden, "insufficient_scope")
	// Another admin, but through an agent client: approvals come from people.
	viaAgent := h.token("appr", "boss", auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin)
	r = h.do("POST", path+"/approve", viaAgent, nil)
	wantStatus(t, r, http.StatusForbidden, "operation_denied")
	if !strings.Contains(string(r.Body), "approvals come from people") {
		t.Fatalf("agent approval: %s", r.Body)
	}

	list := h.do("GET", "/api/billing/confirmations", h.admin("appr", "boss"), nil)
	if !strings.Contains(string(list.Body), `"approval":"pending"`) || !strings.Contains(string(list.Body), `"client":"test-agent"`) {
		t.Fatalf("admin's list: %s", list.Body)
	}
	r = h.do("POST", path+"/approve", h.admin("appr", "boss"), nil)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"approval":"granted"`) || !strings.Contains(string(r.Body), `"approver":"boss"`) {
		t.Fatalf("approve: %s", r.Body)
	}
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	events := h.auditEvents("appr")
	for _, e := range events {
		if e.Event == "APPROVAL_GRANTED" && e.Principal != "boss" {
			t.Fatalf("approval audited for %q", e.Principal)
		}
	}
	names := strings.Join(eventNames(events), " ")
	if !strings.Contains(names, "APPROVAL_GRANTED") {
		t.Fatalf("audit: %s", names)
	}
}

func TestApprovalRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("rej", "Rej", "pro")
	h.setPolicy("rej", `{"rules":[{"name":"big spend","amount_due_above_cents":100,"action":"approve"}]}`)
	tok := h.user("rej", "rita")
	p := h.proposeApproval(tok, "scale")
	r := h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/reject", h.admin("rej", "boss"), nil)
	wantStatus(t, r, http.StatusOK, "")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_rejected")
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("rej", "boss2"), nil),
		http.StatusConflict, "consent_token_invalid")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan %s after a rejection", sub)
	}
	if names := strings.Join(eventNames(h.auditEvents("rej")), " "); !strings.Contains(names, "APPROVAL_REJECTED") {
		t.Fatalf("audit: %s", names)
	}
}

func TestApprovalAfterExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "1s"))
	h.createOrg("exp", "Exp", "pro")
	h.setPolicy("exp", `{"rules":[{"name":"always","action":"approve"}]}`)
	tok := h.user("exp", "eve")
	p := h.proposeApproval(tok, "scale")
	if p.TTLSeconds != 1 {
		t.Fatalf("approval extended the TTL to %d without an approval window", p.TTLSeconds)
	}
	time.Sleep(1500 * time.Millisecond)
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("exp", "boss"), nil),
		http.StatusGone, "consent_token_expired")
}

func TestDailyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("daily", "Daily", "free")
	h.setPolicy("daily", `{"rules":[],"daily_limit":1}`)
	tok := h.user("daily", "dot")
	first := h.propose(tok, "upgrade", "pro")
	wantStatus(t, h.confirm(tok, "upgrade", "pro", first.ConfirmToken), http.StatusOK, "")
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`), http.StatusForbidden, "operation_denied")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan %s", sub)
	}
	if names := strings.Join(eventNames(h.auditEvents("daily")), " "); !strings.Contains(names, "OPERATION_DENIED:daily limit") {
		t.Fatalf("audit: %s", names)
	}
}

// TestPolicyCheckedAgainAtExecution: a token issued while the policy allowed
// the change does not execute once a deny rule or the daily limit applies.
func TestPolicyCheckedAgainAtExecution(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("later", "Later", "free")
	tok := h.user("later", "lena")
	first := h.propose(tok, "upgrade", "pro")
	wantStatus(t, h.confirm(tok, "upgrade", "pro", first.ConfirmToken), http.StatusOK, "")

	overLimit := h.propose(tok, "upgrade", "scale")
	h.setPolicy("later", `{"rules":[],"daily_limit":1}`)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", overLimit.ConfirmToken), http.StatusForbidden, "operation_denied")

	h.setPolicy("later", `{"rules":[]}`)
	denied := h.propose(tok, "upgrade", "scale")
	h.setPolicy("later", `{"rules":[{"name":"no scale","to_plans":["scale"],"action":"deny"}]}`)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", denied.ConfirmToken), http.StatusForbidden, "operation_denied")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan %s", sub)
	}
}

// proposeApproval makes a first call of upgrade_plan that must need approval.
func (h *harness) proposeApproval(token, to string) proposal {
	h.t.Helper()
	return h.proposeApprovalOf(token, "upgrade", to)
}

// proposeApprovalOf makes a first call of op ("upgrade" or "downgrade") that
// must need approval.
func (h *harness) proposeApprovalOf(token, op, to string) proposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, `{"to":"`+to+`"}`)
	wantStatus(h.t, r, http.StatusAccepted, "")
	var body struct {
		proposal
		ApprovalRequired bool   `json:"approval_required"`
		ApprovalURL      string `json:"approval_url"`
	}
	r.decode(h.t, &body)
	if !body.ApprovalRequired || body.ApprovalURL != h.env["PUBLIC_BASE_URL"]+"/approvals/"+body.ConfirmationID {
		h.t.Fatalf("no approval asked: %s", r.Body)
	}
	return body.proposal
}

// TestPolicyAgentRuleOverMCP: a rule for agents applies to every MCP call,
// whatever the token's client id, even one in PERSON_CLIENTS.
func TestPolicyAgentRuleOverMCP(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("agents", "Agents", "pro")
	h.setPolicy("agents", `{"rules":[{"name":"no agents","caller":"agent","action":"deny"}]}`)
	rw := []string{auth.ScopeRead, auth.ScopeWrite}
	h.propose(h.tokenOf(personClient, "agents", "ann", rw...), "upgrade", "scale") // over REST with a PERSON_CLIENTS client: a person
	wantStatus(t, h.do("POST", "/api/billing/upgrade", h.user("agents", "ann"), `{"to":"scale"}`), http.StatusForbidden, "operation_denied")
	for _, client := range []string{"mcp-agent", personClient} {
		cs := mcpConnect(t, h.url, h.mcpToken("agents", "ann", client, rw...), "")
		wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), "operation_denied")
	}
}

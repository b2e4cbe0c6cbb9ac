package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// Only a person loosens the gate (contract §4): an agent, whatever its
// scopes, may take power away but never give it.

// TestAgentAdminCannotLoosenTheGate: an agent client whose token carries
// billing:admin (and read and write) tries to remove the approval it would
// wait for and to silence or replace the approvers' channel. Each attempt
// answers 403 operation_denied saying a person must do it, is audited as
// refused, and changes nothing: the policy, the endpoints and the endpoint's
// secret are as the person left them, and the agent's change still waits
// for approval with nothing made at Stripe. Reading stays allowed, and
// taking power away (cancelling its own confirmation) too.
func TestAgentAdminCannotLoosenTheGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"))
	acct := h.createOrg("loose", "Loose", "pro")
	h.setPolicy("loose", agentsNeedApproval)
	slack := h.addEndpoint("loose", map[string]any{"url": "http://127.0.0.1:9/services/T000/B000/XXXX",
		"events": []string{"approval.requested"}, "format": "slack"})
	person := h.admin("loose", "ada")
	policyBefore := h.do("GET", "/api/billing/policy", person, nil).Body
	endpointsBefore := h.do("GET", "/api/billing/webhook-endpoints", person, nil).Body

	agent := h.token("loose", "bot", auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin)
	for _, try := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/api/billing/policy", `{"rules":[]}`},
		{"PUT", "/api/billing/policy", `{"rules":[{"name":"anything goes","action":"allow"}]}`},
		{"POST", "/api/billing/webhook-endpoints", map[string]any{"url": "http://127.0.0.1:9/agent", "events": []string{"approval.requested"}}},
		{"DELETE", "/api/billing/webhook-endpoints/" + slack.ID, nil},
		{"POST", "/api/billing/webhook-endpoints/" + slack.ID + "/rotate-secret", nil},
	} {
		r := h.do(try.method, try.path, agent, try.body)
		wantStatus(t, r, http.StatusForbidden, "operation_denied")
		if !strings.Contains(string(r.Body), "a person must") {
			t.Errorf("%s %s: %s, want a message saying a person must do it", try.method, try.path, r.Body)
		}
	}
	if after := h.do("GET", "/api/billing/policy", person, nil).Body; string(after) != string(policyBefore) {
		t.Errorf("the policy changed:\n%s\nwas\n%s", after, policyBefore)
	}
	if after := h.do("GET", "/api/billing/webhook-endpoints", person, nil).Body; string(after) != string(endpointsBefore) {
		t.Errorf("the endpoints changed:\n%s\nwas\n%s", after, endpointsBefore)
	}
	refused := 0
	for _, e := range h.auditEvents("loose") {
		if e.Event == billing.EventOperationDenied && e.Principal == "bot" && e.Reason == "person_required" {
			refused++
		}
		if e.Event == billing.EventPolicyUpdated && e.Principal == "bot" {
			t.Errorf("POLICY_UPDATED in the agent's name")
		}
	}
	if refused != 5 {
		t.Errorf("%d refusals audited as OPERATION_DENIED person_required, want 5", refused)
	}

	// Reading is not loosening.
	wantStatus(t, h.do("GET", "/api/billing/policy", agent, nil), http.StatusOK, "")
	wantStatus(t, h.do("GET", "/api/billing/webhook-endpoints", agent, nil), http.StatusOK, "")
	// The change still waits for a person.
	p := h.proposeApproval(agent, "scale")
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_pending")
	if made := h.changesAtStripe(acct.Subscription.StripeSubscriptionID); len(made) != 0 {
		t.Fatalf("Stripe made %v without a person's approval", made)
	}
	// Taking power away stays allowed.
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/cancel", agent, nil), http.StatusOK, "")
}

// TestEveryKindOfAgentIsRefusedLoosening: an agent is whatever is not a
// person (contract §4), not what the org names in agent_clients: a client
// in neither PERSON_CLIENTS nor agent_clients, and a PERSON_CLIENTS client
// the org names an agent (agent_clients adds agents, never people), are
// each refused every loosening act with billing:admin, and the endpoints
// stay as the person left them (none added, deleted or rotated).
func TestEveryKindOfAgentIsRefusedLoosening(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"))
	h.createOrg("kinds", "Kinds", "pro")
	hook := h.addEndpoint("kinds", map[string]any{"url": "http://127.0.0.1:9/services/T0/B0/people",
		"events": []string{"approval.requested"}, "format": "slack"}).ID
	h.setPolicy("kinds", `{"agent_clients":["test-agent","`+personClient+`"],
		"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
	for _, client := range []string{"stranger-bot", personClient} {
		tok := h.tokenOf(client, "kinds", "mallory", auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin)
		for _, try := range []struct{ method, path, body string }{
			{"PUT", "/api/billing/policy", `{"rules":[]}`},
			{"POST", "/api/billing/webhook-endpoints", `{"url":"http://127.0.0.1:9/agent","events":["approval.requested"]}`},
			{"DELETE", "/api/billing/webhook-endpoints/" + hook, ""},
			{"POST", "/api/billing/webhook-endpoints/" + hook + "/rotate-secret", ""},
		} {
			var body any
			if try.body != "" {
				body = try.body
			}
			r := h.do(try.method, try.path, tok, body)
			if r.Status != http.StatusForbidden || r.errorCode(t) != "operation_denied" {
				t.Errorf("%s %s as client %s (billing:admin): %d %s, want 403 operation_denied", try.method, try.path, client, r.Status, r.Body)
			}
		}
	}
	var list struct {
		Endpoints []webhookEndpoint `json:"webhook_endpoints"`
	}
	h.do("GET", "/api/billing/webhook-endpoints", h.token("kinds", "reader", auth.ScopeAdmin), nil).decode(t, &list)
	if len(list.Endpoints) != 1 || list.Endpoints[0].ID != hook || list.Endpoints[0].PreviousSecretUntil != "" {
		t.Errorf("the endpoints changed: %+v", list.Endpoints)
	}
}

// TestEndpointListHidesSlackURL: a Slack incoming-webhook URL is a bearer
// credential (whoever holds it posts into the approvers' channel), so the
// list shows its origin and /services/… only; the creating answer alone
// shows what the person just entered.
func TestEndpointListHidesSlackURL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"))
	h.createOrg("slk", "Slk", "pro")
	const secretPath = "/services/T000/B000/XXXXSECRET"
	created := h.addEndpoint("slk", map[string]any{"url": "http://127.0.0.1:9" + secretPath,
		"events": []string{"approval.requested"}, "format": "slack"})
	if created.URL != "http://127.0.0.1:9"+secretPath {
		t.Fatalf("the creating answer shows %q", created.URL)
	}
	std := h.addEndpoint("slk", map[string]any{"url": "http://127.0.0.1:9/billing?token=QUERYSECRET", "events": []string{"approval.requested"}})
	for _, tok := range []string{h.admin("slk", "ada"), h.token("slk", "bot", auth.ScopeRead, auth.ScopeAdmin)} {
		r := h.do("GET", "/api/billing/webhook-endpoints", tok, nil)
		wantStatus(t, r, http.StatusOK, "")
		if strings.Contains(string(r.Body), "XXXXSECRET") || strings.Contains(string(r.Body), "QUERYSECRET") {
			t.Fatalf("the list shows a credential: %s", r.Body)
		}
		var list struct {
			Endpoints []webhookEndpoint `json:"webhook_endpoints"`
		}
		r.decode(t, &list)
		for _, e := range list.Endpoints {
			want := map[string]string{created.ID: "http://127.0.0.1:9/services/…", std.ID: "http://127.0.0.1:9/billing?…"}[e.ID]
			if e.URL != want {
				t.Errorf("listed %q, want %q", e.URL, want)
			}
		}
	}
}

// TestRefusedLooseningSpendsNoProposalBudget: a refused loosening changes
// nothing (contract §4), so its OPERATION_DENIED (person_required, no
// confirmation) is no first call: an agent holding only billing:admin,
// which cannot propose at all, trying PUT /policy as often as the
// principal's RATE_LIMIT_PROPOSALS allows does not rate-limit the person's
// own first call through their console.
func TestRefusedLooseningSpendsNoProposalBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_PROPOSALS", "2"), withEnv("RATE_LIMIT_WINDOW", "1m"))
	h.createOrg("rl", "RL", "pro")
	agent := h.tokenOf("test-agent", "rl", "ada", auth.ScopeAdmin)
	for range 2 {
		wantStatus(t, h.do("PUT", "/api/billing/policy", agent, `{"rules":[]}`), http.StatusForbidden, "operation_denied")
	}
	r := h.do("POST", "/api/billing/upgrade", h.admin("rl", "ada"), map[string]string{"to": "scale"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("the person's first call after the agent's refused tries: %d %s, want 202", r.Status, r.Body)
	}
}

// changesAtStripe is every write that changed the subscription at Stripe
// (a preview, or a schedule made from the subscription, changes nothing).
func (h *harness) changesAtStripe(sub string) []stripepaytest.Write {
	h.t.Helper()
	var changes []stripepaytest.Write
	for _, w := range h.fake.WritesFor(sub) {
		if w.Changed() {
			changes = append(changes, w)
		}
	}
	return changes
}

package integration

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devenv"
	"github.com/billingd/billingd/internal/devissuer"
)

// agentsMayNotGoFree is a policy whose one rule matches agents only.
const agentsMayNotGoFree = `{"rules":[{"name":"agents may not go free","caller":"agent","to_plans":["free"],"action":"deny"}]}`

// TestWhoIsAPersonOverREST: through a real billingd serve (PERSON_CLIENTS
// is the harness's test-console), a call is a person's only from a
// PERSON_CLIENTS client or billingd's own signed-in pages. The dev
// welcome's demo-agent, which nobody vouched for, and a token with no
// client are agents: a caller: agent rule matches them and the receipt and
// OPERATION_EXECUTED of their change say agent_relayed, no human present.
// An org's agent_clients makes even a PERSON_CLIENTS client an agent, and
// so does a token that names an actor (act: someone acting on the
// person's behalf) (contract §4, §10, §11).
func TestWhoIsAPersonOverREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rw := []string{auth.ScopeRead, auth.ScopeWrite}
	for _, tt := range []struct {
		name         string
		org          string
		agentClients string
		token        func(org string) string
		agent        bool
	}{
		{"the dev welcome's demo-agent", "p-demo", "", func(org string) string { return h.tokenOf(devenv.AgentClient, org, "ann", rw...) }, true},
		{"a token with no client", "p-none", "", func(org string) string { return h.tokenOf("", org, "ann", rw...) }, true},
		{"a PERSON_CLIENTS client", "p-listed", "", func(org string) string { return h.tokenOf(personClient, org, "ann", rw...) }, false},
		{"a PERSON_CLIENTS client the org lists in agent_clients", "p-both", personClient,
			func(org string) string { return h.tokenOf(personClient, org, "ann", rw...) }, true},
		// A token exchanged for an agent (RFC 8693) that kept the
		// person's client as azp: act says someone acts for ann.
		{"a PERSON_CLIENTS client acting on ann's behalf (act)", "p-act", "", func(org string) string {
			return mint(t, h, devissuer.Claims{Subject: "ann", Org: org, Client: personClient, Scopes: rw,
				Audience: []string{h.env["PUBLIC_BASE_URL"]}, Extra: map[string]any{"act": map[string]any{"sub": "agent-bot"}}})
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.createOrg(tt.org, tt.name, "pro")
			policy := agentsMayNotGoFree
			if tt.agentClients != "" {
				policy = strings.Replace(policy, `{"rules"`, `{"agent_clients":["`+tt.agentClients+`"],"rules"`, 1)
			}
			h.setPolicy(tt.org, policy)
			tok := tt.token(tt.org)
			h.wantAgentRuleMatched(t, tok, tt.agent)
			p := h.propose(tok, "upgrade", "scale")
			wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
			if tt.agent {
				h.wantConsent(tt.org, p.ConfirmationID, billing.ConsentAgentRelayed, billing.HumanNone)
			} else {
				h.wantConsent(tt.org, p.ConfirmationID, billing.ConsentPersonSession, billing.HumanAttested)
			}
		})
	}
	t.Run("only a person approves", func(t *testing.T) {
		h.createOrg("p-appr", "Approvals", "pro")
		h.setPolicy("p-appr", `{"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
		p := h.proposeApproval(h.tokenOf(devenv.AgentClient, "p-appr", "ann", rw...), "scale")
		path := "/api/billing/confirmations/" + p.ConfirmationID + "/approve"
		all := append(rw, auth.ScopeAdmin)
		for _, client := range []string{devenv.AgentClient, ""} {
			wantStatus(t, h.do("POST", path, h.tokenOf(client, "p-appr", "boss", all...), nil), http.StatusForbidden, "operation_denied")
		}
		wantStatus(t, h.do("POST", path, h.tokenOf(personClient, "p-appr", "boss", all...), nil), http.StatusOK, "")
	})
	t.Run("billingd's own signed-in pages", func(t *testing.T) {
		h.createOrg("p-page", "Pages", "pro")
		h.setPolicy("p-page", agentsMayNotGoFree)
		h.signInPeople("p-page", nil, "pia")
		v, csrf := h.signInOnPages("pia")
		down := v.call(h, "/api/billing/downgrade", csrf, `{"to":"free"}`)
		wantStatus(t, down, http.StatusAccepted, "") // the agents' rule does not match
		up := v.call(h, "/api/billing/upgrade", csrf, `{"to":"scale"}`)
		wantStatus(t, up, http.StatusAccepted, "")
		var p proposal
		up.decode(t, &p)
		wantStatus(t, v.call(h, "/api/billing/upgrade", csrf, `{"to":"scale","confirm_token":"`+p.ConfirmToken+`"}`), http.StatusOK, "")
		h.wantConsent("p-page", p.ConfirmationID, billing.ConsentPersonSession, billing.HumanAttested)
	})
}

// wantAgentRuleMatched checks whether agentsMayNotGoFree's rule denies
// tok's downgrade to free: it does exactly for an agent.
func (h *harness) wantAgentRuleMatched(t *testing.T, tok string, agent bool) {
	t.Helper()
	r := h.do("POST", "/api/billing/downgrade", tok, `{"to":"free"}`)
	if agent {
		wantStatus(t, r, http.StatusForbidden, "operation_denied")
		return
	}
	wantStatus(t, r, http.StatusAccepted, "")
}

// hiddenField matches a hidden input of the dev issuer's login form.
var hiddenField = regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`)

// signInOnPages signs subject in on billingd's pages through the harness's
// issuer (signInPeople), as a browser without JavaScript would: it returns
// the visitor holding the session cookie and the session's CSRF token.
func (h *harness) signInOnPages(subject string) (*visitor, string) {
	h.t.Helper()
	v := newVisitor(h.t)
	login := v.get(h.url + "/auth/login?return_to=/")
	form := url.Values{"user": {subject}}
	for _, m := range hiddenField.FindAllStringSubmatch(login.body, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	if form.Get("csrf_token") == "" {
		h.t.Fatalf("no login form at %s (%d): %.400s", login.url, login.status, login.body)
	}
	v.post(login.url.String(), form)
	var session struct {
		SignedIn bool   `json:"signed_in"`
		CSRF     string `json:"csrf_token"`
	}
	r := v.api(h, "/auth/session")
	if err := json.Unmarshal(r.Body, &session); err != nil || !session.SignedIn || session.CSRF == "" {
		h.t.Fatalf("not signed in: %d %s (%v)", r.Status, r.Body, err)
	}
	return v, session.CSRF
}

// call POSTs body to billingd's API with the session cookie and its CSRF
// token, as the dashboard's script does.
func (v *visitor) call(h *harness, path, csrf, body string) response {
	v.t.Helper()
	req, err := http.NewRequest("POST", h.url+path, strings.NewReader(body))
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", csrf)
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	r, err := readResponse(resp)
	if err != nil {
		v.t.Fatal(err)
	}
	return r
}

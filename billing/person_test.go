package billing

import "testing"

// TestWhoIsAPerson: a call is a person's only from billingd's own signed-in
// pages or a client the operator lists in PERSON_CLIENTS; everything else
// is an agent's, and an org's agent_clients can add agents, never persons
// (contract §4).
func TestWhoIsAPerson(t *testing.T) {
	pp := people{clients: []string{"acme-dashboard", "shared-app"}}
	policy := Policy{AgentClients: []string{"support-bot", "shared-app", "billingd-pages"}}
	for _, c := range []struct {
		name   string
		caller Caller
		agent  bool
	}{
		{"a REST client nobody vouched for (the dev welcome's demo-agent)", Caller{Client: "demo-agent"}, true},
		{"a token with no client", Caller{}, true},
		{"a PERSON_CLIENTS client", Caller{Client: "acme-dashboard"}, false},
		{"a PERSON_CLIENTS client the org names an agent", Caller{Client: "shared-app"}, true},
		{"an agent_clients client", Caller{Client: "support-bot"}, true},
		{"over MCP, even with a PERSON_CLIENTS client", Caller{Client: "acme-dashboard", Agent: true}, true},
		{"billingd's signed-in pages", Caller{Client: "billingd-dev-pages", Session: true}, false},
		{"billingd's pages with no client recorded", Caller{Session: true}, false},
		{"billingd's pages, whose client the org names an agent", Caller{Client: "billingd-pages", Session: true}, true},
	} {
		if got := pp.isAgent(policy, c.caller); got != c.agent {
			t.Errorf("%s: agent %v, want %v", c.name, got, c.agent)
		}
	}
}

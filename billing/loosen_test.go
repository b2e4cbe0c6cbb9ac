package billing_test

import (
	"context"
	"testing"

	"github.com/billingd/billingd/billing"
)

// TestOnlyAPersonLoosens: whatever its scopes, an agent (a client nobody
// listed, a token with no client, a client the org names an agent, any
// MCP call) is refused every act that gives power, with operation_denied
// audited as OPERATION_DENIED (reason person_required, the act as its
// operation); the policy stays as it was. People (a PERSON_CLIENTS client,
// the signed-in pages) pass (contract §4).
func TestOnlyAPersonLoosens(t *testing.T) {
	ctx := context.Background()
	rule := billing.PolicyRule{Name: "agents need a human", Caller: "agent", Action: billing.ActionApprove}
	acts := []billing.Act{billing.ActSetPolicy, billing.ActGrantMandate, billing.ActDecideApproval, billing.ActManageWebhooks}
	for name, agent := range map[string]billing.Caller{
		"a client nobody listed":        {Org: "org_vb", Principal: "boss", Admin: true, Client: "stranger"},
		"a token with no client":        {Org: "org_vb", Principal: "boss", Admin: true},
		"a client the org names agent":  {Org: "org_vb", Principal: "boss", Admin: true, Client: "bot"},
		"over MCP, with a person's app": {Org: "org_vb", Principal: "boss", Admin: true, Client: "console", Agent: true},
	} {
		f := newApproversFixture(t, 0, rule)
		for _, act := range acts {
			wantCode(t, f.svc.RequirePerson(ctx, agent, act), billing.CodeOperationDenied)
		}
		_, err := f.svc.SetPolicy(ctx, agent, billing.Policy{})
		wantCode(t, err, billing.CodeOperationDenied)
		if p, _ := f.svc.Policy(ctx, dave); len(p.Rules) != 1 {
			t.Errorf("%s: the policy changed to %+v", name, p)
		}
		refused := map[string]bool{}
		for _, e := range f.store.Snapshot().Audit {
			if e.Event == billing.EventOperationDenied && e.Reason == "person_required" && e.Principal == "boss" {
				refused[e.Operation] = true
			}
		}
		for _, act := range acts {
			if !refused[string(act)] {
				t.Errorf("%s: %s refused without its OPERATION_DENIED event", name, act)
			}
		}
	}
	f := newApproversFixture(t, 0, rule)
	for _, person := range []billing.Caller{dave, carol} {
		for _, act := range acts {
			if err := f.svc.RequirePerson(ctx, person, act); err != nil {
				t.Errorf("%s (a person) refused %s: %v", person.Principal, act, err)
			}
		}
	}
}

package billing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// executedConsent is the consent of the org's last OPERATION_EXECUTED event.
func (f handshakeFixture) executedConsent(t *testing.T) *billing.Consent {
	t.Helper()
	audit := f.store.Snapshot().Audit
	for i := len(audit) - 1; i >= 0; i-- {
		if audit[i].Event == billing.EventOperationExecuted {
			return audit[i].Consent
		}
	}
	t.Fatal("no OPERATION_EXECUTED event")
	return nil
}

// TestConsentRecordedOnExecution: the OPERATION_EXECUTED event states how
// the person agreed: the channel's claim as billing caps it, policy_allow
// for a change the policy ran at once.
func TestConsentRecordedOnExecution(t *testing.T) {
	t.Run("agent relayed", func(t *testing.T) {
		f := newHandshakeFixture(t)
		p := f.propose(t, alice, billing.OpUpgrade, "scale")
		caller := alice
		caller.Consent = billing.ConsentPersonSession // REST says so for every caller
		setPolicy(f, billing.Policy{AgentClients: []string{alice.Client}})
		if _, err := f.confirm(caller, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
			t.Fatal(err)
		}
		if k := f.executedConsent(t); k == nil || k.Method != billing.ConsentAgentRelayed || k.HumanPresent != billing.HumanNone {
			t.Fatalf("consent %+v", k)
		}
	})
	t.Run("policy allow", func(t *testing.T) {
		f := newHandshakeFixture(t)
		setPolicy(f, billing.Policy{Rules: []billing.PolicyRule{{Name: "downgrades", Operation: billing.OpDowngrade, Action: billing.ActionAllow}}})
		caller := alice
		caller.Consent = billing.ConsentPersonSession
		res, err := f.svc.ChangePlan(context.Background(), caller, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "free"})
		if err != nil || !res.OK {
			t.Fatalf("allow: %+v, %v", res, err)
		}
		if k := f.executedConsent(t); k == nil || k.Method != billing.ConsentPolicyAllow || k.HumanPresent != billing.HumanNone {
			t.Fatalf("consent %+v", k)
		}
	})
}

// TestConsentSurvivesSettling: the consent is recorded with the attempt, so
// a change whose outcome was unknown and is settled by the reconciler (a
// caller with no channel at all) still says how the person agreed.
func TestConsentSurvivesSettling(t *testing.T) {
	f := newHandshakeFixture(t)
	mcp := alice
	mcp.Agent, mcp.Consent = true, billing.ConsentElicitationForm
	p := f.propose(t, mcp, billing.OpUpgrade, "scale")
	f.provider.ApplyErrs = []error{fmt.Errorf("timeout: %w", billing.ErrUnavailable)}
	_, err := f.confirm(mcp, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if c := f.confirmation(t, p.ConfirmationID); c.Consent == nil || c.Consent.Method != billing.ConsentElicitationForm {
		t.Fatalf("consent recorded with the attempt: %+v", c.Consent)
	}
	f.store.Advance(time.Second)
	if n, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil || n != 1 {
		t.Fatalf("settled %d, %v", n, err)
	}
	if k := f.executedConsent(t); k == nil || k.Method != billing.ConsentElicitationForm || k.HumanPresent != billing.HumanAttested {
		t.Fatalf("consent after settling %+v", k)
	}
}

// newPersonFixture is the handshake under policy with PERSON_CLIENTS set to
// personClients, keeping the claims of the receipts it signs.
func newPersonFixture(t *testing.T, policy billing.Policy, personClients ...string) (handshakeFixture, *claimsSigner) {
	t.Helper()
	acct := testAccount()
	acct.Policy = policy
	store := billingtest.NewStore(dbNow, acct)
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"}, PeriodEnd: periodEnd,
		ReadState: billingtest.StateOf(testAccount())}
	signer := &claimsSigner{}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, PublicBaseURL: "https://billing.example", Receipts: signer, PersonClients: personClients})
	if err != nil {
		t.Fatal(err)
	}
	return handshakeFixture{svc: svc, store: store, provider: provider}, signer
}

// TestWhoIsAPersonDecidesConsent: a REST caller's claim of a person's own
// call (REST makes it for every bearer token) is recorded as person_session
// only for billingd's signed-in pages or a PERSON_CLIENTS client; any other
// caller's change is agent_relayed with no human present, in the
// OPERATION_EXECUTED event and in the signed receipt alike (contract §4,
// §11).
func TestWhoIsAPersonDecidesConsent(t *testing.T) {
	const dashboard = "acme-dashboard"
	rest := func(client string) billing.Caller {
		return billing.Caller{Org: "org_vb", Principal: "alice", Client: client, RequestID: "r", Consent: billing.ConsentPersonSession}
	}
	session := rest("billingd-pages")
	session.Session = true
	relayed := billing.Consent{Method: billing.ConsentAgentRelayed, HumanPresent: billing.HumanNone}
	personal := billing.Consent{Method: billing.ConsentPersonSession, HumanPresent: billing.HumanAttested}
	for _, tt := range []struct {
		name         string
		caller       billing.Caller
		agentClients []string
		want         billing.Consent
	}{
		{"a REST client nobody vouched for (demo-agent)", rest("demo-agent"), nil, relayed},
		{"a token with no client", rest(""), nil, relayed},
		{"a PERSON_CLIENTS client", rest(dashboard), nil, personal},
		{"a PERSON_CLIENTS client the org lists in agent_clients", rest(dashboard), []string{dashboard}, relayed},
		{"billingd's own signed-in pages", session, nil, personal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, signer := newPersonFixture(t, billing.Policy{AgentClients: tt.agentClients}, dashboard)
			p := f.propose(t, tt.caller, billing.OpUpgrade, "scale")
			if _, err := f.confirm(tt.caller, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
				t.Fatal(err)
			}
			if k := f.executedConsent(t); k == nil || *k != tt.want {
				t.Fatalf("OPERATION_EXECUTED consent %+v, want %+v", k, tt.want)
			}
			if len(signer.signed) != 1 || signer.signed[0].Consent == nil || *signer.signed[0].Consent != tt.want {
				t.Fatalf("receipt consent %+v, want %+v", signer.signed, tt.want)
			}
			if c := f.confirmation(t, p.ConfirmationID); c.Agent != (tt.want == relayed) {
				t.Fatalf("confirmation marked agent %v", c.Agent)
			}
		})
	}
}

// TestWhoIsAPersonDecidesPolicy: a caller: agent rule matches every caller
// that is not a person, a caller: user rule only a person.
func TestWhoIsAPersonDecidesPolicy(t *testing.T) {
	const dashboard = "acme-dashboard"
	policy := billing.Policy{Rules: []billing.PolicyRule{
		{Name: "no scale for agents", ToPlans: []string{"scale"}, Caller: "agent", Action: billing.ActionDeny},
		{Name: "people verify downgrades", ToPlans: []string{"free"}, Caller: "user", Action: billing.ActionVerify},
	}}
	for _, tt := range []struct {
		name   string
		caller billing.Caller
		agent  bool
	}{
		{"demo-agent", billing.Caller{Org: "org_vb", Principal: "alice", Client: "demo-agent"}, true},
		{"no client", billing.Caller{Org: "org_vb", Principal: "alice"}, true},
		{"PERSON_CLIENTS", billing.Caller{Org: "org_vb", Principal: "alice", Client: dashboard}, false},
		{"signed-in pages", billing.Caller{Org: "org_vb", Principal: "alice", Client: "billingd-pages", Session: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newPersonFixture(t, policy, dashboard)
			_, err := f.svc.ChangePlan(context.Background(), tt.caller, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
			if denied := billing.ErrorCode(err) == billing.CodeOperationDenied; denied != tt.agent {
				t.Fatalf("scale for agents denied %v (%v), want %v", denied, err, tt.agent)
			}
			down := f.propose(t, tt.caller, billing.OpDowngrade, "free")
			if down.VerificationRequired == tt.agent {
				t.Fatalf("the people's rule matched %v, want %v", down.VerificationRequired, !tt.agent)
			}
		})
	}
}

package billing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
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

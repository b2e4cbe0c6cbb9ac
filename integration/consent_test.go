package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/receipt"
)

// wantConsent checks how the person agreed to an executed confirmation, as
// its signed receipt and its OPERATION_EXECUTED event both state it
// (contract §11), and returns the receipt's.
func (h *harness) wantConsent(org, confirmationID string, method billing.ConsentMethod, humanPresent string) billing.Consent {
	h.t.Helper()
	c := h.receiptClaims(h.admin(org, "consent-auditor"), confirmationID)
	if c.Consent == nil || c.Consent.Method != method || c.Consent.HumanPresent != humanPresent {
		h.t.Fatalf("receipt consent %+v, want %s (human present: %s)", c.Consent, method, humanPresent)
	}
	var event *billing.Consent
	for _, e := range h.auditEvents(org) {
		if e.Event == billing.EventOperationExecuted && e.ConfirmationID == confirmationID {
			event = e.Consent
		}
	}
	if event == nil || *event != *c.Consent && !sameConsentTimes(*event, *c.Consent) {
		h.t.Fatalf("OPERATION_EXECUTED consent %+v, receipt's %+v", event, c.Consent)
	}
	return *c.Consent
}

// lastExecuted is the confirmation id of the org's last OPERATION_EXECUTED
// event.
func (h *harness) lastExecuted(org string) string {
	h.t.Helper()
	id := ""
	for _, e := range h.auditEvents(org) {
		if e.Event == billing.EventOperationExecuted {
			id = e.ConfirmationID
		}
	}
	if id == "" {
		h.t.Fatalf("org %s: nothing executed", org)
	}
	return id
}

func sameConsentTimes(a, b billing.Consent) bool {
	if a.AuthTime == nil || b.AuthTime == nil || !a.AuthTime.Equal(*b.AuthTime) {
		return false
	}
	a.AuthTime, b.AuthTime = nil, nil
	return a == b
}

// TestConsentOverREST: each way a change executes over REST records how the
// person agreed, and none claims more than it has: an agent client is only
// relayed, a person's own call is a session, an approval names the
// approver, a step-up sign-in is verified with its auth_time and acr, and a
// change the policy ran at once was agreed by nobody.
func TestConsentOverREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	t.Run("person_session", func(t *testing.T) {
		h.createOrg("c-person", "Person", "pro")
		tok := h.admin("c-person", "pat") // client test-console: not an agent
		p := h.propose(tok, "upgrade", "scale")
		wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
		h.wantConsent("c-person", p.ConfirmationID, billing.ConsentPersonSession, billing.HumanAttested)
	})
	t.Run("agent_relayed", func(t *testing.T) {
		h.createOrg("c-agent", "Agent", "pro")
		h.setPolicy("c-agent", `{"agent_clients":["test-agent"]}`)
		tok := h.user("c-agent", "ann")
		p := h.propose(tok, "upgrade", "scale")
		wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
		h.wantConsent("c-agent", p.ConfirmationID, billing.ConsentAgentRelayed, billing.HumanNone)
	})
	t.Run("a person redeeming an agent's token is still relayed", func(t *testing.T) {
		h.createOrg("c-mixed", "Mixed", "pro")
		h.setPolicy("c-mixed", `{"agent_clients":["test-agent"]}`)
		p := h.propose(h.user("c-mixed", "max"), "upgrade", "scale")
		person := h.tokenOf("test-console", "c-mixed", "max", "billing:read", "billing:write")
		wantStatus(t, h.confirm(person, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
		h.wantConsent("c-mixed", p.ConfirmationID, billing.ConsentAgentRelayed, billing.HumanNone)
	})
	t.Run("approved", func(t *testing.T) {
		h.createOrg("c-appr", "Appr", "pro")
		h.setPolicy("c-appr", `{"agent_clients":["test-agent"],"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
		agent := h.user("c-appr", "ada")
		p := h.proposeApproval(agent, "scale")
		wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("c-appr", "boss"), nil), http.StatusOK, "")
		wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
		if k := h.wantConsent("c-appr", p.ConfirmationID, billing.ConsentApproved, billing.HumanAttested); k.ApprovedBy != "boss" {
			t.Fatalf("approved_by %q", k.ApprovedBy)
		}
	})
	t.Run("verified_sign_in by step-up", func(t *testing.T) {
		h.createOrg("c-step", "Step", "pro")
		h.setPolicy("c-step", verifyEverything)
		p := h.proposeVerify(h.stepUpToken("c-step", "vera", time.Now().Add(-10*time.Minute), ""), "upgrade", "scale")
		signedIn := time.Now().Truncate(time.Second)
		wantStatus(t, h.confirm(h.stepUpToken("c-step", "vera", signedIn, "urn:test:mfa"), "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
		k := h.wantConsent("c-step", p.ConfirmationID, billing.ConsentVerifiedSignIn, billing.HumanVerified)
		if k.AuthTime == nil || !k.AuthTime.Equal(signedIn) || k.ACR != "urn:test:mfa" {
			t.Fatalf("verified consent %+v, want auth_time %s and the acr", k, signedIn)
		}
	})
	t.Run("policy_allow", func(t *testing.T) {
		h.createOrg("c-allow", "Allow", "pro")
		h.setPolicy("c-allow", `{"rules":[{"name":"trust us","action":"allow"}]}`)
		r := h.do("POST", "/api/billing/downgrade", h.user("c-allow", "al"), `{"to":"free"}`)
		wantStatus(t, r, http.StatusOK, "")
		h.wantConsent("c-allow", h.lastExecuted("c-allow"), billing.ConsentPolicyAllow, billing.HumanNone)
	})
}

// receiptClaims are the verified claims of an executed confirmation's
// receipt, read with token.
func (h *harness) receiptClaims(token, confirmationID string) billing.ReceiptClaims {
	h.t.Helper()
	r := h.do("GET", "/api/billing/confirmations/"+confirmationID+"/receipt", token, nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var view billing.ReceiptView
	r.decode(h.t, &view)
	c, err := receipt.Verify(view.Receipt, h.receiptKeys())
	if err != nil {
		h.t.Fatalf("receipt of %s: %v", confirmationID, err)
	}
	return c
}

package billing

import (
	"strings"
	"time"
)

// How the person agreed (contract §11). A receipt says what was agreed;
// Consent says how, which is what a dispute turns on: whether billingd has
// only an agent's word that a person said yes, a client's or a host's, or
// proof of its own that the person was there.
//
// Each transport states on Caller.Consent what its channel lets the person
// do (a claim), and billing records at execution the strongest method the
// confirmation and the channel can actually show, never more:
//
//   - a recorded fresh sign-in of the requester (the verification page or a
//     step-up token) is verified_sign_in, whatever the channel;
//   - a granted approval is approved, naming the approver;
//   - otherwise the channel's claim, only where that channel can make it:
//     elicitation_form and mcp_app_view only over MCP (an agent channel),
//     person_session only for a person's own call (person.go: billingd's
//     signed-in pages or a PERSON_CLIENTS client) redeeming a confirmation
//     that is not an agent's;
//   - anything else is agent_relayed: billingd has only the word of whoever
//     presented the token;
//   - a change the org's policy let run without asking anyone is
//     policy_allow; one a standing mandate covered is mandate, naming it.

// ConsentMethod names how the person agreed.
type ConsentMethod string

// The consent methods (contract §11).
const (
	// ConsentAgentRelayed: an agent presented the token; billingd has only
	// the agent's word that the person agreed.
	ConsentAgentRelayed ConsentMethod = "agent_relayed"
	// ConsentPersonSession: the person's own call, signed in on
	// billingd's pages or through a client the operator lists in
	// PERSON_CLIENTS (person.go).
	ConsentPersonSession ConsentMethod = "person_session"
	// ConsentElicitationForm: the MCP client showed the summary in its own
	// form and the person ticked it: the client's word.
	ConsentElicitationForm ConsentMethod = "elicitation_form"
	// ConsentMCPAppView: the person pressed Confirm in billingd's own MCP
	// Apps view, rendered by the host.
	ConsentMCPAppView ConsentMethod = "mcp_app_view"
	// ConsentVerifiedSignIn: the requester signed in afresh at the identity
	// provider after the change was proposed (verify level).
	ConsentVerifiedSignIn ConsentMethod = "verified_sign_in"
	// ConsentApproved: another person with billing:admin approved.
	ConsentApproved ConsentMethod = "approved"
	// ConsentPolicyAllow: the org's policy let the change run without
	// asking anyone.
	ConsentPolicyAllow ConsentMethod = "policy_allow"
	// ConsentMandate: the person was not asked; a standing mandate they
	// signed for earlier, after a fresh sign-in, covered the change
	// (mandate.go). MandateID names it.
	ConsentMandate ConsentMethod = "mandate"
)

// Whether a person was present when the change was agreed to.
const (
	// HumanVerified: billingd itself has proof (a fresh sign-in at the
	// identity provider).
	HumanVerified = "verified"
	// HumanAttested: a surface meant for a person (a signed-in session, a
	// client's form, billingd's view in a host, an approver's session) says
	// a person acted; billingd has no proof of its own.
	HumanAttested = "attested"
	// HumanNone: nothing shows that a person took part in this call.
	HumanNone = "none"
)

// Consent is how the person agreed to an executed change, as its receipt
// and OPERATION_EXECUTED event state it.
type Consent struct {
	Method       ConsentMethod `json:"method"`
	HumanPresent string        `json:"human_present"`
	// AuthTime and ACR describe the fresh sign-in (verified_sign_in).
	AuthTime *time.Time `json:"auth_time,omitempty"`
	ACR      string     `json:"acr,omitempty"`
	// ApprovedBy is the approver (approved).
	ApprovedBy string `json:"approved_by,omitempty"`
	// MandateID is the standing mandate the change was made under
	// (mandate).
	MandateID string `json:"mandate_id,omitempty"`
}

// consentFor is how the person agreed to c, executed now by caller
// (callerIsAgent: by the one rule of person.go): the strongest method c and
// the caller's channel can show.
func consentFor(c Confirmation, caller Caller, callerIsAgent bool) *Consent {
	if caller.viaAllow {
		return &Consent{Method: ConsentPolicyAllow, HumanPresent: HumanNone}
	}
	if caller.mandate != "" {
		return &Consent{Method: ConsentMandate, HumanPresent: HumanNone, MandateID: caller.mandate}
	}
	if recorded := recordedConsent(c); recorded != nil {
		return recorded
	}
	agent := c.Agent || callerIsAgent
	switch caller.Consent {
	case ConsentElicitationForm, ConsentMCPAppView:
		if caller.Agent { // these dialogs exist only over MCP
			return &Consent{Method: caller.Consent, HumanPresent: HumanAttested}
		}
	case ConsentPersonSession:
		if !agent {
			return &Consent{Method: ConsentPersonSession, HumanPresent: HumanAttested}
		}
	}
	return &Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}
}

// recordedConsent is the consent c's own record shows, whoever makes the
// call: a fresh sign-in of the requester, or an approval; nil if neither.
func recordedConsent(c Confirmation) *Consent {
	if v := c.Verification; v != nil && !v.VerifiedAt.IsZero() {
		k := &Consent{Method: ConsentVerifiedSignIn, HumanPresent: HumanVerified, ACR: v.ACR}
		if !v.AuthTime.IsZero() {
			at := v.AuthTime.UTC()
			k.AuthTime = &at
		}
		return k
	}
	if c.Approval == ApprovalGranted && c.Approver != "" {
		return &Consent{Method: ConsentApproved, HumanPresent: HumanAttested, ApprovedBy: approvedBy(c)}
	}
	return nil
}

// approvedBy names everyone who approved c, in order ("alice, bob"); the
// last approver for one approved before several approvers existed.
func approvedBy(c Confirmation) string {
	if len(c.Approvers) == 0 {
		return c.Approver
	}
	return strings.Join(c.Approvers, ", ")
}

// consentOf is the consent to state for executed c: the one recorded with
// its attempt, or, for an attempt whose record was lost with a rolled-back
// transaction, what c's own record shows, else the weakest.
func consentOf(c Confirmation) *Consent {
	if c.Consent != nil && c.Consent.Method != "" {
		return c.Consent
	}
	if recorded := recordedConsent(c); recorded != nil {
		return recorded
	}
	return &Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}
}

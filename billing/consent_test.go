package billing

import (
	"testing"
	"time"
)

// TestConsentFor: every path that can execute a change records how the
// person agreed, and no path can claim more than it has (contract §11).
func TestConsentFor(t *testing.T) {
	authAt := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	person := Caller{Org: "o", Principal: "alice", Client: "dashboard"} // a person by person.go's rule
	overMCP := Caller{Org: "o", Principal: "alice", Client: "claude", Agent: true}
	with := func(c Caller, m ConsentMethod) Caller { c.Consent = m; return c }
	verified := Confirmation{Verification: &Verification{VerifiedAt: authAt.Add(time.Minute), Method: VerifiedByPage,
		Authentication: Authentication{AuthTime: authAt, ACR: "passkey"}}}
	approved := Confirmation{Approval: ApprovalGranted, Approver: "bob"}
	tests := []struct {
		name   string
		c      Confirmation
		caller Caller
		agent  bool // the caller is an agent by person.go's rule
		want   Consent
	}{
		{"REST agent: only the agent's word", Confirmation{}, with(Caller{Client: "bot"}, ConsentPersonSession), true,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"REST person (signed in, or a PERSON_CLIENTS client)", Confirmation{}, with(person, ConsentPersonSession), false,
			Consent{Method: ConsentPersonSession, HumanPresent: HumanAttested}},
		{"a person redeeming an agent's confirmation: still relayed", Confirmation{Agent: true}, with(person, ConsentPersonSession), false,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"MCP tool call with the token", Confirmation{Agent: true}, overMCP, true,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"MCP cannot claim a person's session", Confirmation{Agent: true}, with(overMCP, ConsentPersonSession), true,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"MCP elicitation form accepted", Confirmation{Agent: true}, with(overMCP, ConsentElicitationForm), true,
			Consent{Method: ConsentElicitationForm, HumanPresent: HumanAttested}},
		{"MCP Apps view Confirm", Confirmation{Agent: true}, with(overMCP, ConsentMCPAppView), true,
			Consent{Method: ConsentMCPAppView, HumanPresent: HumanAttested}},
		{"REST cannot claim an elicitation", Confirmation{}, with(person, ConsentElicitationForm), false,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"REST cannot claim the MCP Apps view", Confirmation{}, with(person, ConsentMCPAppView), false,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"a claim billing does not know", Confirmation{}, with(person, "telepathy"), false,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"verification page or step-up, whoever calls", verified, overMCP, true,
			Consent{Method: ConsentVerifiedSignIn, HumanPresent: HumanVerified, AuthTime: &authAt, ACR: "passkey"}},
		{"approved by another person", approved, overMCP, true,
			Consent{Method: ConsentApproved, HumanPresent: HumanAttested, ApprovedBy: "bob"}},
		{"an approval still pending is no approval", Confirmation{Approval: ApprovalPending}, overMCP, true,
			Consent{Method: ConsentAgentRelayed, HumanPresent: HumanNone}},
		{"the policy allowed it without asking", Confirmation{}, Caller{viaAllow: true, Consent: ConsentMCPAppView, Agent: true}, true,
			Consent{Method: ConsentPolicyAllow, HumanPresent: HumanNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := consentFor(tt.c, tt.caller, tt.agent)
			if !sameConsent(*got, tt.want) {
				t.Errorf("consent %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// TestConsentOf: an executed change states the consent recorded with its
// attempt; one whose record was lost states only what the confirmation's
// own record shows, else the weakest.
func TestConsentOf(t *testing.T) {
	recorded := &Consent{Method: ConsentMCPAppView, HumanPresent: HumanAttested}
	for name, tt := range map[string]struct {
		c    Confirmation
		want ConsentMethod
	}{
		"recorded":                 {Confirmation{Consent: recorded}, ConsentMCPAppView},
		"lost, approved":           {Confirmation{Approval: ApprovalGranted, Approver: "bob"}, ConsentApproved},
		"lost, nothing to show":    {Confirmation{}, ConsentAgentRelayed},
		"lost, verified":           {Confirmation{Verification: &Verification{VerifiedAt: time.Now()}}, ConsentVerifiedSignIn},
		"empty record is no proof": {Confirmation{Consent: &Consent{}}, ConsentAgentRelayed},
	} {
		if got := consentOf(tt.c); got.Method != tt.want {
			t.Errorf("%s: %s, want %s", name, got.Method, tt.want)
		}
	}
}

func sameConsent(a, b Consent) bool {
	sameTime := a.AuthTime == nil && b.AuthTime == nil || a.AuthTime != nil && b.AuthTime != nil && a.AuthTime.Equal(*b.AuthTime)
	return a.Method == b.Method && a.HumanPresent == b.HumanPresent && a.ACR == b.ACR && a.ApprovedBy == b.ApprovedBy && sameTime
}

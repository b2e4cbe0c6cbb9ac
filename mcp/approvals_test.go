package mcp

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/billingd/billingd/billing"
)

// TestProposalSchemaShowsApprovals: the plan tools' output schema has the
// approval progress (contract §10: the first call's details show how many
// approved and how many are needed) as optional properties, so a proposal
// that needs no approval still validates against it.
func TestProposalSchemaShowsApprovals(t *testing.T) {
	s, err := jsonschema.For[changeOutput](nil)
	if err != nil {
		t.Fatal(err)
	}
	details := s.Properties["details"]
	for _, name := range []string{"approvals_given", "approvals_required"} {
		if details == nil || details.Properties[name] == nil {
			t.Fatalf("details has no %s", name)
		}
		if slices.Contains(details.Required, name) {
			t.Fatalf("details requires %s: a proposal needing no approval would not validate", name)
		}
	}
}

// TestMCPSaysHowManyApprove: the texts an agent and the user get for a
// change that needs approval say how many people must approve it.
func TestMCPSaysHowManyApprove(t *testing.T) {
	given, required := 0, 3
	three := billing.ChangeResult{Summary: "Upgrade Acme.", ApprovalRequired: true, ApprovalURL: "https://b.example/approvals/cnf_1",
		Details: &billing.Details{ApprovalProgress: billing.ApprovalProgress{ApprovalsGiven: &given, ApprovalsRequired: &required}}}
	one := three
	one.Details = &billing.Details{}
	for name, c := range map[string]struct {
		res  billing.ChangeResult
		want string
	}{
		"three": {three, "3 other billing administrators"},
		"one":   {one, "another billing administrator"},
	} {
		url := elicitParams(pending{Mode: modeURL, Proposal: c.res})
		if text := approvalText(c.res); !strings.Contains(text, c.want) || !strings.Contains(url.Message, c.want) {
			t.Errorf("%s: %q and %q do not say %q", name, text, url.Message, c.want)
		}
	}
}

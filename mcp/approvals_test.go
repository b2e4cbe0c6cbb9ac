package mcp

import (
	"slices"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
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

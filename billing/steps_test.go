package billing

import (
	"context"
	"testing"
)

// TestPathsNameEveryStepOnce: the sweep iterates Paths, so a step listed
// twice would be swept twice and a name shared by two steps could not be
// armed alone.
func TestPathsNameEveryStepOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, path := range Paths() {
		for _, step := range path {
			if seen[step.String()] {
				t.Errorf("%s listed twice", step)
			}
			seen[step.String()] = true
		}
	}
}

// BenchmarkStepDisarmed is what a step costs in production, where no hook
// is installed: make bench reports it beside a handshake's time.
func BenchmarkStepDisarmed(b *testing.B) {
	s := &Service{}
	ctx := context.Background()
	c := Confirmation{ID: "cfm_x", Org: "org"}
	for b.Loop() {
		s.at(ctx, StepSend, &c)
	}
}

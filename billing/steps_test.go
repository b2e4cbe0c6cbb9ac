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

// TestStepHooksComposes: tracing's hook and the failpoints' both run, in
// order; nil hooks are left out, and none at all stays nil (free).
func TestStepHooksComposes(t *testing.T) {
	if StepHooks(nil, nil) != nil {
		t.Fatal("StepHooks of nil hooks is not nil")
	}
	var got []string
	hook := func(name string) StepHook {
		return func(_ context.Context, at StepEvent) { got = append(got, name+":"+at.Step.String()) }
	}
	StepHooks(hook("tracing"), nil, hook("failpoints")).At(context.Background(), StepSend, StepEvent{})
	want := []string{"tracing:second_call/send", "failpoints:second_call/send"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("hooks ran %v, want %v", got, want)
	}
}

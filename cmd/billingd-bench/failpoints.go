package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// failpointCost is what the money path's named steps (billing/steps.go)
// cost in production, where no hook is installed: each step is then one
// nil check. Measured with testing.Benchmark on the step itself, since a
// nanosecond disappears in any end-to-end number.
type failpointCost struct {
	perStep   time.Duration
	perCall   int // steps a handshake (first and second call) passes
	handshake time.Duration
}

func measureFailpoints(rows []comparison) failpointCost {
	var hook billing.StepHook // production: none
	ctx := context.Background()
	at := billing.StepEvent{Org: "org", Confirmation: "cfm_bench"}
	r := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			hook.At(ctx, billing.StepSend, at)
		}
	})
	paths := billing.Paths()
	cost := failpointCost{perStep: time.Duration(r.NsPerOp()), perCall: len(paths[0]) + len(paths[1])}
	if row, ok := findRow(rows, handshake, 1); ok {
		cost.handshake = row.service.medianP50()
	}
	return cost
}

func writeFailpoints(b *strings.Builder, c failpointCost) {
	b.WriteString("### Failpoints\n\n")
	fmt.Fprintf(b, "Every named step of the money path is a failpoint a test can arm (billing/steps.go). Disarmed, "+
		"as in production, a step costs **%d ns**; a handshake passes %d steps: **%d ns** per handshake",
		c.perStep.Nanoseconds(), c.perCall, c.perStep.Nanoseconds()*int64(c.perCall))
	if c.handshake > 0 {
		fmt.Fprintf(b, ", against a median handshake of %s (%.5f%%)", msText(c.handshake),
			100*float64(c.perStep)*float64(c.perCall)/float64(c.handshake))
	}
	b.WriteString(": nothing measurable.\n\n")
}

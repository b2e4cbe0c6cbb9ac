package tracing

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/billingd/billingd/billing"
)

// Attributes naming what a step is about. The confirmation id is how an
// operator finds, from a settler's or a webhook's trace, the request that
// made the confirmation (its server span has the same step spans).
const (
	AttrConfirmationID = attribute.Key("billingd.confirmation_id")
	AttrOrg            = attribute.Key("billingd.org_id")
	AttrSubscription   = attribute.Key("billingd.stripe_subscription_id")
	AttrStep           = attribute.Key("billingd.step")
)

// StepHook makes each named step of the money path a span: it begins where
// the step begins (billing.StepHook) and ends where the next step of the
// same request or round begins, or where the request or round ends. Step
// spans are siblings under the request's span, so a step's database and
// Stripe spans lie within its time, not under it: the billing package
// hands the hook its context but takes none back. nil when off.
func (t *Tracing) StepHook() billing.StepHook {
	if t == nil {
		return nil
	}
	return func(ctx context.Context, at billing.StepEvent) {
		attrs := stepAttributes(at)
		if steps, ok := ctx.Value(stepSpansKey{}).(*stepSpans); ok {
			steps.begin(ctx, t.tracer, at.Step.String(), attrs)
			return
		}
		// No request or round to close the span: a mark on the current one.
		trace.SpanFromContext(ctx).AddEvent(at.Step.String(), trace.WithAttributes(attrs...))
	}
}

func stepAttributes(at billing.StepEvent) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrStep.String(at.Step.String())}
	if at.Confirmation != "" {
		attrs = append(attrs, AttrConfirmationID.String(at.Confirmation))
	}
	if at.Org != "" {
		attrs = append(attrs, AttrOrg.String(at.Org))
	}
	if at.Subscription != "" {
		attrs = append(attrs, AttrSubscription.String(at.Subscription))
	}
	return attrs
}

type stepSpansKey struct{}

// stepSpans holds the step span still open in one request or round.
type stepSpans struct {
	mu     sync.Mutex
	open   trace.Span
	closed bool
}

// stepSpans returns ctx carrying a place for the step spans of the work it
// starts, and the function that ends the last one.
func (t *Tracing) stepSpans(ctx context.Context) (context.Context, func()) {
	s := &stepSpans{}
	return context.WithValue(ctx, stepSpansKey{}, s), s.close
}

// begin ends the open step span and starts the next, under ctx's span.
func (s *stepSpans) begin(ctx context.Context, tracer trace.Tracer, name string, attrs []attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil {
		s.open.End()
	}
	_, span := tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	if s.closed {
		// Work that goes on after its request ended (recording a Stripe
		// answer on a context of its own): the step is marked, no span is
		// left open.
		span.End()
		return
	}
	s.open = span
}

func (s *stepSpans) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil {
		s.open.End()
		s.open = nil
	}
	s.closed = true
}

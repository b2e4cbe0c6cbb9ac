package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/requestid"
)

// ObservePayments wraps a payment provider so that every call is timed into
// billingd_stripe_request_duration_seconds, and every call that changes
// something at Stripe, or fails, is logged with the request id that caused
// it and, when executing, the confirmation id Stripe records in the
// subscription's metadata: the log line joins the two. A read that succeeds
// (a preview, a subscription read, an invoice list) for a request is only
// timed: its line said nothing the request's access line and the metric do
// not, and it was a write to the log on every first call (issue 39). Reads
// of the background rounds (settling, restoring), which have no access
// line, are still logged. The wrapped provider's answers pass through
// unchanged.
func (m *Metrics) ObservePayments(next billing.PaymentProvider, log *slog.Logger) billing.PaymentProvider {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &observedPayments{next: next, m: m, log: log}
}

type observedPayments struct {
	next billing.PaymentProvider
	m    *Metrics
	log  *slog.Logger
}

func (p *observedPayments) PreviewPlanChange(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	start := time.Now()
	preview, err := p.next.PreviewPlanChange(ctx, change)
	p.observeRead(ctx, "preview_plan_change", start, err)
	return preview, err
}

func (p *observedPayments) ApplyPlanChange(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	start := time.Now()
	applied, err := p.next.ApplyPlanChange(ctx, change, idempotencyKey)
	p.observe(ctx, "apply_plan_change", start, err, "confirmation_id", change.ConfirmationID)
	return applied, err
}

func (p *observedPayments) ReadSubscription(ctx context.Context, subscriptionID string) (billing.ProviderSubscription, error) {
	start := time.Now()
	state, err := p.next.ReadSubscription(ctx, subscriptionID)
	p.observeRead(ctx, "read_subscription", start, err)
	return state, err
}

func (p *observedPayments) SubscriptionInvoices(ctx context.Context, subscriptionID string, since time.Time) ([]billing.Invoice, error) {
	start := time.Now()
	invoices, err := p.next.SubscriptionInvoices(ctx, subscriptionID, since)
	p.observeRead(ctx, "list_invoices", start, err)
	return invoices, err
}

func (p *observedPayments) CreateCustomer(ctx context.Context, c billing.NewCustomer, idempotencyKey string) (billing.CreatedCustomer, error) {
	start := time.Now()
	created, err := p.next.CreateCustomer(ctx, c, idempotencyKey)
	p.observe(ctx, "create_customer", start, err, "org", c.OrgID)
	return created, err
}

// observe times a call that changes something at Stripe and logs it.
func (p *observedPayments) observe(ctx context.Context, call string, start time.Time, err error, attrs ...any) {
	p.logCall(ctx, call, err, p.measure(call, start, err), attrs)
}

// observeRead times a call that changes nothing at Stripe and logs it
// when it failed or when no request made it.
func (p *observedPayments) observeRead(ctx context.Context, call string, start time.Time, err error) {
	elapsed := p.measure(call, start, err)
	if err != nil || requestid.From(ctx) == "" {
		p.logCall(ctx, call, err, elapsed, nil)
	}
}

// measure records the call in billingd_stripe_request_duration_seconds.
func (p *observedPayments) measure(call string, start time.Time, err error) time.Duration {
	elapsed := time.Since(start)
	p.m.stripe.WithLabelValues(call, providerOutcome(err)).Observe(elapsed.Seconds())
	return elapsed
}

func (p *observedPayments) logCall(ctx context.Context, call string, err error, elapsed time.Duration, attrs []any) {
	attrs = append(attrs, "call", call, "outcome", providerOutcome(err), "duration_ms", elapsed.Milliseconds(),
		"request_id", requestid.From(ctx))
	p.log.InfoContext(ctx, "stripe call", attrs...)
}

// providerOutcome names the kind of a provider answer, from the sentinels of
// billing.PaymentProvider's contract.
func providerOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, billing.ErrPaymentDeclined):
		return "declined"
	case errors.Is(err, billing.ErrProviderRejected):
		return "rejected"
	case errors.Is(err, billing.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return "unavailable"
	default:
		return "error"
	}
}

package billingtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/billingd/billingd/billing"
)

// ApplyCall is one ApplyPlanChange request a Provider received.
type ApplyCall struct {
	Change billing.PlanChange
	Key    string // idempotency key
}

// Provider is a billing.PaymentProvider that honours idempotency keys, as
// Stripe does: a key that already succeeded returns the stored result without
// changing anything again. Set its fields before the service uses it; read
// what it received through its methods.
type Provider struct {
	Preview    billing.Preview // answered by every PreviewPlanChange
	PreviewErr error           // returned with Preview
	// ApplyErrs are returned by successive ApplyPlanChange calls, before
	// anything changes; nil or exhausted: success.
	ApplyErrs []error
	PeriodEnd time.Time                    // the period end of every applied change
	ReadState billing.ProviderSubscription // answered by ReadSubscription
	ReadErr   error                        // returned with ReadState

	mu       sync.Mutex
	previews []billing.PlanChange
	calls    []ApplyCall
	done     map[string]billing.AppliedChange // idempotency key → result
	changes  int                              // subscription changes actually made
}

var _ billing.PaymentProvider = (*Provider)(nil)

// PreviewPlanChange implements billing.PaymentProvider: it records change and
// answers Preview, PreviewErr.
func (p *Provider) PreviewPlanChange(_ context.Context, change billing.PlanChange) (billing.Preview, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.previews = append(p.previews, change)
	return p.Preview, p.PreviewErr
}

// ApplyPlanChange implements billing.PaymentProvider.
func (p *Provider) ApplyPlanChange(_ context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, ApplyCall{change, key})
	if len(p.ApplyErrs) > 0 {
		err := p.ApplyErrs[0]
		p.ApplyErrs = p.ApplyErrs[1:]
		if err != nil {
			return billing.AppliedChange{}, err
		}
	}
	if r, ok := p.done[key]; ok {
		return r, nil
	}
	if p.done == nil {
		p.done = map[string]billing.AppliedChange{}
	}
	p.changes++
	r := billing.AppliedChange{Status: "active", CurrentPeriodEnd: p.PeriodEnd, ItemID: "si_new"}
	p.done[key] = r
	return r, nil
}

// ReadSubscription implements billing.PaymentProvider: it answers ReadState,
// or ReadErr.
func (p *Provider) ReadSubscription(context.Context, string) (billing.ProviderSubscription, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ReadState, p.ReadErr
}

// CreateCustomer implements billing.PaymentProvider; the handshake's tests
// never create customers, so it fails.
func (p *Provider) CreateCustomer(context.Context, billing.NewCustomer, string) (billing.CreatedCustomer, error) {
	return billing.CreatedCustomer{}, errors.New("billingtest.Provider: CreateCustomer not implemented")
}

// ApplyCalls returns every ApplyPlanChange request received, in order.
func (p *Provider) ApplyCalls() []ApplyCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Previews returns every PreviewPlanChange request received, in order.
func (p *Provider) Previews() []billing.PlanChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.previews)
}

// Changes reports how many subscription changes were actually made: a
// request replayed under a key that already succeeded makes none.
func (p *Provider) Changes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes
}

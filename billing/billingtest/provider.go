package billingtest

import (
	"context"
	"errors"
	"fmt"
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
	PeriodEnd time.Time // the period end of every applied change
	// ReadState is the subscription as the provider has it: answered by
	// ReadSubscription, and changed by every change ApplyPlanChange makes
	// (its price and metadata), as Stripe's would be.
	ReadState billing.ProviderSubscription
	ReadErr   error // returned by ReadSubscription instead, when set
	// ReadErrs are returned by successive ReadSubscription calls before
	// ReadErr; nil entries answer ReadState.
	ReadErrs []error

	// InvoiceDelta is added to the previewed amount on the invoice of every
	// change charged at once: tax or a discount that moved after the quote.
	InvoiceDelta int64
	// Invoices are the subscription's invoices, newest first, as
	// SubscriptionInvoices lists them; ListErr fails it instead.
	Invoices []billing.Invoice
	ListErr  error
	// Clock dates the invoices it makes (their Created), as Stripe's clock
	// would; nil leaves them undated.
	Clock func() time.Time

	mu       sync.Mutex
	invoices int
	previews []billing.PlanChange
	calls    []ApplyCall
	done     map[string]billing.AppliedChange // idempotency key → result
	changes  int                              // subscription changes actually made
}

var _ billing.PaymentProvider = (*Provider)(nil)

// StateOf is a's subscription as the provider has it when it agrees with
// billingd (prices named as billing.DefaultPlans names them): a Provider's
// ReadState to start from.
func StateOf(a billing.Account) billing.ProviderSubscription {
	return billing.ProviderSubscription{PriceID: "price_billingd_" + a.Subscription.Plan, ItemID: a.Subscription.StripeItemID,
		Items: 1, Quantity: 1, Status: a.Subscription.Status, CurrentPeriodEnd: a.Subscription.CurrentPeriodEnd}
}

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
	if change.Attached != nil && !change.AtPeriodEnd {
		p.ReadState.Schedule = nil // released
	}
	r := billing.AppliedChange{Status: "active", CurrentPeriodEnd: p.PeriodEnd, ItemID: p.ReadState.ItemID}
	switch {
	case change.KeepPlan:
		p.ReadState.Schedule = nil
		r.CurrentPeriodEnd, r.PriceID = p.ReadState.CurrentPeriodEnd, p.ReadState.PriceID
		p.done[key] = r
		return r, nil
	case change.AtPeriodEnd:
		p.ReadState.Schedule = &billing.ProviderSchedule{ID: "sub_sched_" + key, // a new schedule per request
			ConfirmationID: change.ConfirmationID, NextPriceID: change.NewPriceID, NextAt: change.PeriodEnd}
		r.CurrentPeriodEnd, r.Schedule = change.PeriodEnd, p.ReadState.Schedule
		p.done[key] = r
		return r, nil
	}
	p.ReadState.PriceID, p.ReadState.ConfirmationID = change.NewPriceID, change.ConfirmationID
	p.ReadState.Status, p.ReadState.CurrentPeriodEnd = "active", p.PeriodEnd
	if change.ChargeNow {
		p.invoices++
		r.Invoice = &billing.Invoice{ID: fmt.Sprintf("in_%d", p.invoices), AmountDueCents: p.Preview.AmountDueNowCents + p.InvoiceDelta,
			Currency: p.Preview.Currency, ConfirmationID: change.ConfirmationID, BillingReason: billing.BillingReasonUpdate,
			Created: p.now(), Prorations: []billing.ProrationLine{{PriceID: change.FromPriceID, Start: change.ProrationDate},
				{PriceID: change.NewPriceID, Start: change.ProrationDate}}}
		p.ReadState.LatestInvoice = r.Invoice
	}
	p.done[key] = r
	return r, nil
}

func (p *Provider) now() time.Time {
	if p.Clock == nil {
		return time.Time{}
	}
	return p.Clock()
}

// SubscriptionInvoices implements billing.PaymentProvider: the Invoices
// created at or after since, or ListErr.
func (p *Provider) SubscriptionInvoices(_ context.Context, _ string, since time.Time) ([]billing.Invoice, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ListErr != nil {
		return nil, p.ListErr
	}
	var out []billing.Invoice
	for _, inv := range p.Invoices {
		if !inv.Created.Before(since) {
			out = append(out, inv)
		}
	}
	return out, nil
}

// ReadSubscription implements billing.PaymentProvider: it answers ReadState,
// or ReadErr.
func (p *Provider) ReadSubscription(context.Context, string) (billing.ProviderSubscription, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ReadErrs) > 0 {
		err := p.ReadErrs[0]
		p.ReadErrs = p.ReadErrs[1:]
		if err != nil {
			return billing.ProviderSubscription{}, err
		}
		return p.ReadState, nil
	}
	if p.ReadErr != nil {
		return billing.ProviderSubscription{}, p.ReadErr
	}
	return p.ReadState, nil
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

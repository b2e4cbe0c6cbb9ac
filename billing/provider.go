package billing

import (
	"context"
	"time"
)

// PlanChange is a subscription item price swap, as previewed and as executed.
type PlanChange struct {
	CustomerID     string
	SubscriptionID string
	ItemID         string
	NewPriceID     string
	// FromQuantity and Quantity are the item's quantity before and after
	// (change_seats); a plan change keeps the seats (Stripe would reset
	// them to one with a new price sent alone). FromQuantity 0: Quantity.
	FromQuantity int64
	Quantity     int64
	// Cancellation ends the subscription now (prorated: the unused time
	// credited to the customer's balance), at the period's end, or
	// resumes it (cancel_at_period_end false); "" for a change of price or
	// seats. CancelReason and CancelComment are its cancellation_details.
	Cancellation  Cancellation
	CancelReason  string
	CancelComment string
	// ProrationDate pins the proration: the preview quotes it and execution
	// sends the same value, so the amount shown is the amount charged.
	ProrationDate time.Time
	// ChargeNow invoices and charges the prorated difference immediately and
	// refuses the change if the payment fails (upgrades). Otherwise the
	// proration is carried to the next invoice (downgrades).
	ChargeNow bool
	// ConfirmationID is the confirmation being executed ("" for a preview).
	// Providers record it with the change so that it can be traced from the
	// provider's side to the audit log; it is the same on every retry, so it
	// never breaks an idempotent replay the way a per-request value would.
	ConfirmationID string
	// FromPriceID is the subscription's price now (the quote's).
	FromPriceID string
	// AtPeriodEnd schedules the change for PeriodEnd, the end of the
	// current period, with a subscription schedule instead of making it
	// now: nothing is prorated, charged or credited now. Its preview is
	// the renewal invoice at the new price (Preview.AtRenewal).
	AtPeriodEnd bool
	PeriodEnd   time.Time
	// KeepPlan: the change only cancels the scheduled change, by releasing
	// the attached schedule; the price stays FromPriceID.
	KeepPlan bool
	// Attached is the schedule attached to the subscription when it was
	// last read (ProviderSubscription.Schedule); nil if none. A change made
	// now releases it first, so that no phase it holds undoes the change
	// at the period's end; AtPeriodEnd sets its phases instead, in one
	// request that either schedules the new change or leaves the old one
	// (a subscription has at most one schedule).
	Attached *ProviderSchedule
}

// ProviderSchedule is a subscription schedule at the provider (Stripe's
// subscription_schedule) as billingd reads it.
type ProviderSchedule struct {
	ID string
	// ConfirmationID is the confirmation whose change set the phases
	// (the schedule's metadata), "" if billingd did not.
	ConfirmationID string
	// PhaseStart is when the current phase started: an update of the
	// phases keeps it.
	PhaseStart time.Time
	// NextPriceID and NextAt are the phase after the current one, if any:
	// the price the schedule moves the subscription to, and when. Empty
	// when the schedule changes nothing more.
	NextPriceID string
	NextAt      time.Time
	// NextQuantity is the seats of that phase (1 at least when it is set).
	NextQuantity int64
	// Opaque: the schedule changes something billingd neither shows nor
	// may undo (it cancels the subscription at its end, or its next phase
	// has more items or a trial). A change is never sent over one: it is
	// drift.
	Opaque bool
}

// Scheduled reports whether the schedule will still change the plan.
func (s *ProviderSchedule) Scheduled() bool { return s != nil && s.NextPriceID != "" }

// Amounts are an invoice's amount due with its parts: AmountDueCents =
// Subtotal − Discount + Tax − CreditApplied.
type Amounts struct {
	AmountDueCents     int64 `json:"amount_due_cents"`
	SubtotalCents      int64 `json:"subtotal_cents"`
	DiscountCents      int64 `json:"discount_cents"`
	TaxCents           int64 `json:"tax_cents"`
	CreditAppliedCents int64 `json:"credit_applied_cents"`
}

// Preview is what a plan change would cost.
type Preview struct {
	// AmountDueNowCents is charged immediately (0 unless ChargeNow).
	AmountDueNowCents int64
	// ProrationCents is the net prorated amount: positive is owed, negative is
	// a credit on the next invoice.
	ProrationCents int64
	Currency       string
	// The parts of AmountDueNowCents when it is charged now (ChargeNow):
	// the invoice's subtotal, its discounts, its exclusive tax and the
	// customer credit balance applied to it, so that AmountDueNowCents =
	// Subtotal − Discount + Tax − CreditApplied. All zero otherwise.
	SubtotalCents      int64
	DiscountCents      int64
	TaxCents           int64
	CreditAppliedCents int64
	// AtRenewal is what the renewal invoice at the new price will charge,
	// as the provider previews it today (PlanChange.AtPeriodEnd only).
	AtRenewal *Amounts
}

// AppliedChange is the subscription after a plan change.
type AppliedChange struct {
	Status           string
	CurrentPeriodEnd time.Time
	ItemID           string
	// Invoice is what the provider invoiced for the change at once
	// (ChargeNow: the update's latest_invoice); nil when it invoiced
	// nothing then (a downgrade's proration waits for the next invoice).
	Invoice *Invoice
	// Schedule is the schedule that holds a change made AtPeriodEnd.
	Schedule *ProviderSchedule
	// PriceID is the subscription's price after the change, when the
	// provider said ("" otherwise): KeepPlan reads it back, since a renewal
	// may have made the scheduled change just before the release.
	PriceID string
	// Quantity is the first item's quantity after the change, when the
	// provider said (0 otherwise): billingd records the seats Stripe has,
	// not the ones it asked for.
	Quantity int64
	// CancelAtPeriodEnd is Stripe's after a cancellation or resumption;
	// CanceledAt when it was cancelled, if it was.
	CancelAtPeriodEnd bool
	CanceledAt        time.Time
}

// Invoice is an invoice the provider made, as far as billingd states it.
type Invoice struct {
	ID             string
	AmountDueCents int64 // after tax, discounts and the customer's credit: what is charged
	// CreditedCents is what a negative total credited to the customer's
	// balance (a cancellation's final invoice): credit, never a refund.
	CreditedCents int64
	Currency      string
	// ConfirmationID is the confirmation named in the subscription's
	// metadata when the invoice was made (Stripe's
	// subscription_details.metadata). Only a hint: every later invoice
	// (a renewal's) inherits the same metadata.
	ConfirmationID string
	// BillingReason is why the provider made the invoice: BillingReasonUpdate
	// for a change's own invoice, "subscription_cycle" for a renewal's.
	BillingReason string
	Created       time.Time // when the provider made it, by the provider's clock
	// Prorations are its proration lines.
	Prorations []ProrationLine
}

// ProrationLine is a proration line of an invoice: the price it prorates
// and where its period starts, which is the proration date of the change
// that made it.
type ProrationLine struct {
	PriceID string
	Start   time.Time
}

// BillingReasonUpdate is the billing reason of the invoice a subscription
// update makes at once (Stripe's "subscription_update").
const BillingReasonUpdate = "subscription_update"

// invoiceSkew is how far the provider's clock may be behind the database's
// when an invoice's creation is compared with a recovery point.
const invoiceSkew = 5 * time.Minute

// invoiceOf returns inv if it is the invoice the provider made for c's
// change, nil otherwise: a subscription's latest invoice, read back later,
// may be a renewal's (which carries the same metadata) or another change's.
// It is c's own only if an update made it (BillingReasonUpdate), within
// c's last attempt (not before its recovery point, less invoiceSkew, nor
// after the quoted period's end), and it prorates c's prices from the
// proration date c quoted.
func invoiceOf(inv *Invoice, c Confirmation) *Invoice {
	if inv == nil || inv.Created.IsZero() {
		return nil
	}
	if c.Terms.Cancellation == CancelNow {
		return finalInvoiceOf(inv, c)
	}
	if inv.ConfirmationID != c.ID || inv.BillingReason != BillingReasonUpdate {
		return nil
	}
	if !c.AttemptedAt.IsZero() && inv.Created.Before(c.AttemptedAt.Add(-invoiceSkew)) {
		return nil
	}
	if end := c.Terms.NextChargeAt; !end.IsZero() && inv.Created.After(end) {
		return nil
	}
	if !proratesChange(inv.Prorations, c.Terms) {
		return nil
	}
	return inv
}

// finalInvoiceOf is inv if it is the final invoice of c's cancellation
// now: made after c's attempt, crediting the unused time of the price c
// cancelled. It names no confirmation (Stripe takes no metadata on a
// cancellation) and prorates from the moment the cancellation was made,
// not from the quote's date; nothing follows it on a cancelled
// subscription.
func finalInvoiceOf(inv *Invoice, c Confirmation) *Invoice {
	if c.AttemptedAt.IsZero() || inv.Created.Before(c.AttemptedAt.Add(-invoiceSkew)) || inv.BillingReason == "subscription_cycle" {
		return nil
	}
	for _, l := range inv.Prorations {
		if l.PriceID == c.Terms.FromPriceID && !l.Start.Before(c.Terms.ProrationDate) {
			return inv
		}
	}
	return nil
}

// proratesChange reports whether lines prorate the change t quotes: a
// line for its new or its old price whose period starts at its proration
// date.
func proratesChange(lines []ProrationLine, t Terms) bool {
	for _, l := range lines {
		if (l.PriceID == t.ToPriceID || l.PriceID == t.FromPriceID) && l.Start.Equal(t.ProrationDate) {
			return true
		}
	}
	return false
}

// NewCustomer asks for a customer with a subscription to one price.
type NewCustomer struct {
	OrgID   string
	Name    string
	Email   string
	PriceID string
}

// CreatedCustomer is the provider's side of a new org.
type CreatedCustomer struct {
	CustomerID       string
	SubscriptionID   string
	ItemID           string
	Status           string
	CurrentPeriodEnd time.Time
}

// ProviderSubscription is a subscription as the provider has it now: what
// a second call checks before it sends a change, what settling an unknown
// outcome reads back, and what a webhook records (an event is only a hint).
type ProviderSubscription struct {
	PriceID          string // the first item's price
	ItemID           string
	Quantity         int64 // the first item's
	Items            int   // how many items the subscription has
	Status           string
	CurrentPeriodEnd time.Time
	// CancelAtPeriodEnd: the subscription ends at CurrentPeriodEnd; a
	// cancelled one has CanceledAt.
	CancelAtPeriodEnd bool
	CanceledAt        time.Time
	// LatestInvoice is the subscription's latest invoice, if any.
	LatestInvoice *Invoice
	// ConfirmationID is the confirmation that last changed the plan, from
	// the subscription's metadata (PlanChange.ConfirmationID).
	ConfirmationID string
	// Schedule is the subscription schedule attached to the subscription,
	// nil if none.
	Schedule *ProviderSchedule
}

// PaymentProvider is the payment system (Stripe). Errors wrap
// ErrPaymentDeclined or ErrProviderRejected when the provider definitely
// refused (nothing changed), and ErrUnavailable when the outcome is unknown
// (timeout, 5xx, connection reset, the key still in flight). A 5xx answer
// wraps ErrProviderFailed too: the provider finished the request, so reading
// the subscription back tells whether it was applied.
type PaymentProvider interface {
	PreviewPlanChange(ctx context.Context, change PlanChange) (Preview, error)
	ApplyPlanChange(ctx context.Context, change PlanChange, idempotencyKey string) (AppliedChange, error)
	ReadSubscription(ctx context.Context, subscriptionID string) (ProviderSubscription, error)
	// SubscriptionInvoices lists the subscription's invoices created at or
	// after since, newest first (one page): how a change settled after the
	// fact finds its own invoice when the latest is a later one (a
	// renewal's).
	SubscriptionInvoices(ctx context.Context, subscriptionID string, since time.Time) ([]Invoice, error)
	CreateCustomer(ctx context.Context, c NewCustomer, idempotencyKey string) (CreatedCustomer, error)
}

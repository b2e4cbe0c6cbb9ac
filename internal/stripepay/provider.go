package stripepay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
)

// PreviewPlanChange asks Stripe what change would cost, as of
// change.ProrationDate, without changing anything.
func (p *Provider) PreviewPlanChange(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	params := &stripe.InvoiceCreatePreviewParams{
		Customer:     stripe.String(change.CustomerID),
		Subscription: stripe.String(change.SubscriptionID),
		SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
			Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
				ID:    stripe.String(change.ItemID),
				Price: stripe.String(change.NewPriceID),
			}},
			ProrationBehavior: stripe.String(prorationBehavior(change.ChargeNow)),
			ProrationDate:     unixParam(change.ProrationDate),
		},
	}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	inv, err := p.api.Invoices.CreatePreview(params)
	if err != nil {
		return billing.Preview{}, classify("preview invoice", err)
	}
	return previewFromInvoice(inv, change.ChargeNow)
}

// ApplyPlanChange swaps the subscription item's price. The same
// idempotencyKey makes Stripe replay the first outcome instead of changing
// the subscription again. The confirmation id goes into the subscription's
// metadata (billingd_confirmation_id) for tracing; a request id would differ
// between a request and its retry, and Stripe refuses a replayed key whose
// parameters differ.
func (p *Provider) ApplyPlanChange(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	if err := checkIdempotencyKey(idempotencyKey); err != nil {
		return billing.AppliedChange{}, fmt.Errorf("stripe update subscription: %w", err)
	}
	params := &stripe.SubscriptionParams{
		Items: []*stripe.SubscriptionItemsParams{{
			ID:    stripe.String(change.ItemID),
			Price: stripe.String(change.NewPriceID),
		}},
		ProrationBehavior: stripe.String(prorationBehavior(change.ChargeNow)),
		ProrationDate:     unixParam(change.ProrationDate),
		PaymentBehavior:   stripe.String(paymentBehavior(change.ChargeNow)),
	}
	if change.ConfirmationID != "" {
		params.AddMetadata(MetadataConfirmationID, change.ConfirmationID)
	}
	// The invoice the update made, with its amounts: what was charged.
	params.Expand = []*string{stripe.String("latest_invoice")}
	params.SetIdempotencyKey(idempotencyKey)
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	sub, err := p.api.Subscriptions.Update(change.SubscriptionID, params)
	if err != nil {
		return billing.AppliedChange{}, classify("update subscription", err)
	}
	itemID, ok := firstItemID(sub)
	if !ok {
		// A price swap keeps the item's id, so the id we sent is still right.
		itemID = change.ItemID
	}
	applied := billing.AppliedChange{
		Status:           string(sub.Status),
		CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
		ItemID:           itemID,
	}
	if change.ChargeNow { // always_invoice: the latest invoice is the one this update made
		applied.Invoice = invoiceOf(sub.LatestInvoice)
	}
	return applied, nil
}

// invoiceOf is what billing states of an (expanded) invoice; nil when
// Stripe sent none, or only its id.
func invoiceOf(inv *stripe.Invoice) *billing.Invoice {
	if inv == nil || inv.ID == "" || inv.Currency == "" {
		return nil
	}
	out := &billing.Invoice{ID: inv.ID, AmountDueCents: inv.AmountDue, Currency: string(inv.Currency)}
	if inv.SubscriptionDetails != nil {
		out.ConfirmationID = inv.SubscriptionDetails.Metadata[MetadataConfirmationID]
	}
	return out
}

// ReadSubscription reads the subscription as Stripe has it now, with its
// latest invoice: before a change is sent, to settle one whose outcome is
// unknown, and on a webhook.
func (p *Provider) ReadSubscription(ctx context.Context, subscriptionID string) (billing.ProviderSubscription, error) {
	params := &stripe.SubscriptionParams{}
	params.Expand = []*string{stripe.String("latest_invoice")}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	sub, err := p.api.Subscriptions.Get(subscriptionID, params)
	if err != nil {
		return billing.ProviderSubscription{}, classify("read subscription", err)
	}
	state := billing.ProviderSubscription{
		Status:           string(sub.Status),
		CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
		ConfirmationID:   sub.Metadata[MetadataConfirmationID],
		LatestInvoice:    invoiceOf(sub.LatestInvoice),
	}
	if sub.Items != nil && len(sub.Items.Data) > 0 {
		item := sub.Items.Data[0]
		state.Items = len(sub.Items.Data)
		if sub.Items.HasMore {
			state.Items++ // more than one page: more than one item
		}
		state.ItemID, state.Quantity = item.ID, item.Quantity
		if item.Price != nil {
			state.PriceID = item.Price.ID
		}
	}
	return state, nil
}

// MetadataConfirmationID is the subscription metadata key naming the
// confirmation that last changed the plan.
const MetadataConfirmationID = "billingd_confirmation_id"

// CreateCustomer creates a customer and subscribes it to c.PriceID. Each of
// the two requests has its own key derived from idempotencyKey, so a retry
// after a failure between them finds the customer already made (Stripe
// replays it) and only then creates the subscription.
func (p *Provider) CreateCustomer(ctx context.Context, c billing.NewCustomer, idempotencyKey string) (billing.CreatedCustomer, error) {
	// The longer of the two derived keys must fit Stripe's limit.
	if err := checkIdempotencyKey(idempotencyKey + ":subscription"); err != nil {
		return billing.CreatedCustomer{}, fmt.Errorf("stripe create customer: %w", err)
	}
	cust, err := p.createCustomer(ctx, c, idempotencyKey+":customer")
	if err != nil {
		return billing.CreatedCustomer{}, err
	}
	sub, err := p.createSubscription(ctx, cust.ID, c, idempotencyKey+":subscription")
	if err != nil {
		return billing.CreatedCustomer{}, err
	}
	itemID, ok := firstItemID(sub)
	if !ok {
		return billing.CreatedCustomer{}, fmt.Errorf("stripe create subscription %s: response has no items", sub.ID)
	}
	return billing.CreatedCustomer{
		CustomerID:       cust.ID,
		SubscriptionID:   sub.ID,
		ItemID:           itemID,
		Status:           string(sub.Status),
		CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
	}, nil
}

func (p *Provider) createCustomer(ctx context.Context, c billing.NewCustomer, key string) (*stripe.Customer, error) {
	params := &stripe.CustomerParams{
		Name:  stripe.String(c.Name),
		Email: stripe.String(c.Email),
	}
	params.AddMetadata("org_id", c.OrgID)
	params.SetIdempotencyKey(key)
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	cust, err := p.api.Customers.New(params)
	if err != nil {
		return nil, classify("create customer", err)
	}
	return cust, nil
}

func (p *Provider) createSubscription(ctx context.Context, customerID string, c billing.NewCustomer, key string) (*stripe.Subscription, error) {
	params := &stripe.SubscriptionParams{
		Customer: stripe.String(customerID),
		Items:    []*stripe.SubscriptionItemsParams{{Price: stripe.String(c.PriceID)}},
	}
	params.AddMetadata("org_id", c.OrgID)
	params.SetIdempotencyKey(key)
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	sub, err := p.api.Subscriptions.New(params)
	if err != nil {
		return nil, classify("create subscription", err)
	}
	return sub, nil
}

// prorationBehavior: an upgrade (chargeNow) invoices and charges the
// prorated difference at once; a downgrade carries the credit to the next
// invoice.
func prorationBehavior(chargeNow bool) string {
	if chargeNow {
		return "always_invoice"
	}
	return "create_prorations"
}

// paymentBehavior: an upgrade must not take effect unless its invoice is
// paid, so a declined card refuses the whole update (402, nothing changed)
// instead of leaving the customer on the new plan with an open invoice.
//
// A downgrade with create_prorations creates no invoice, so no payment is
// attempted and the setting has no effect on today's Stripe; it is pinned to
// allow_incomplete (Stripe's default for updates) rather than
// error_if_incomplete so that, should a payment ever be involved, a failing
// card can never keep a customer on the more expensive plan.
func paymentBehavior(chargeNow bool) string {
	if chargeNow {
		return "error_if_incomplete"
	}
	return "allow_incomplete"
}

// previewFromInvoice maps a preview invoice to what billing quotes.
func previewFromInvoice(inv *stripe.Invoice, chargeNow bool) (billing.Preview, error) {
	proration, err := prorationCents(inv, chargeNow)
	if err != nil {
		return billing.Preview{}, err
	}
	p := billing.Preview{ProrationCents: proration, Currency: string(inv.Currency)}
	if chargeNow {
		// always_invoice: the previewed invoice is the one charged at once.
		// amount_due already nets tax, discounts and customer credit;
		// the parts say how (contract §6).
		p.AmountDueNowCents = inv.AmountDue
		p.SubtotalCents, p.DiscountCents, p.TaxCents, p.CreditAppliedCents = amountParts(inv)
	}
	return p, nil
}

// amountParts splits an invoice's amount_due into the parts Stripe's
// invoice object documents:
//
//   - subtotal: the lines before invoice-level discounts and exclusive tax;
//   - discount: what the discounts take off, subtotal + exclusive tax −
//     total (the sum of total_discount_amounts for invoice-level coupons;
//     derived from the totals so that a discount Stripe already folded into
//     the subtotal is not counted twice);
//   - tax: the exclusive tax of total_tax_amounts (inclusive tax is part of
//     the line amounts, so of the subtotal, and adds nothing);
//   - credit applied: the customer's credit balance (a negative
//     starting_balance) used, total − amount_due.
//
// Parts that do not add up to amount_due (a debt carried on the balance,
// say) are refused by billing rather than stated.
func amountParts(inv *stripe.Invoice) (subtotal, discount, tax, credit int64) {
	if inv.Total < 0 {
		// Nothing is charged; the credit goes to the balance: no parts.
		return 0, 0, 0, 0
	}
	for _, t := range inv.TotalTaxAmounts {
		if t != nil && !t.Inclusive {
			tax += t.Amount
		}
	}
	subtotal = inv.Subtotal
	discount = max(subtotal+tax-inv.Total, 0)
	if inv.StartingBalance < 0 {
		credit = max(inv.Total-inv.AmountDue, 0)
	}
	return subtotal, discount, tax, credit
}

// errLinesIncomplete: the preview's lines do not all fit in the embedded
// page, so their proration lines cannot be summed.
var errLinesIncomplete = errors.New("preview invoice lines are incomplete; cannot sum the proration")

// prorationCents is the net prorated amount of a preview invoice: the sum of
// the lines Stripe marks proration (the credit for the unused time on the old
// price plus the charge for the remaining time on the new one). Summing those
// lines, rather than reading an invoice total, leaves out what is not part of
// the plan change: the next period's full charge in a create_prorations
// preview, pending invoice items, tax and customer credit. No proration line
// means nothing was prorated (same price, or no time left): 0.
//
// That needs every line, and the invoice embeds only the first page of them.
// A one-item subscription yields at most three, so has_more means unrelated
// pending items crowd the page. Then:
//   - always_invoice: the previewed invoice is the immediate proration
//     invoice, so its subtotal is the proration (plus any pending items, which
//     that invoice would charge as well);
//   - create_prorations: there is no trustworthy figure, and a confirmation
//     is bound to the figures its summary states, so refuse to quote rather
//     than quote a wrong credit. The error wraps no billing sentinel: it is
//     neither Stripe's refusal nor an outage.
func prorationCents(inv *stripe.Invoice, chargeNow bool) (int64, error) {
	if inv.Lines != nil && !inv.Lines.HasMore {
		var sum int64
		for _, line := range inv.Lines.Data {
			if line.Proration {
				sum += line.Amount
			}
		}
		return sum, nil
	}
	if chargeNow {
		return inv.Subtotal, nil
	}
	return 0, fmt.Errorf("stripe preview invoice: %w", errLinesIncomplete)
}

// checkIdempotencyKey refuses keys Stripe cannot use, before anything is
// sent: stripe-go would send an empty key as is, and fail a long one with an
// error that would look like an outage (and so be retried forever).
func checkIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty idempotency key")
	case len(key) > 255:
		return fmt.Errorf("idempotency key is %d bytes; Stripe accepts at most 255", len(key))
	}
	return nil
}

func firstItemID(sub *stripe.Subscription) (string, bool) {
	if sub.Items == nil || len(sub.Items.Data) == 0 || sub.Items.Data[0].ID == "" {
		return "", false
	}
	return sub.Items.Data[0].ID, true
}

// unixParam encodes t for Stripe; a zero t is left out, so Stripe uses the
// time it receives the request.
func unixParam(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	return stripe.Int64(t.Unix())
}

func unixTime(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

package stripepay

import (
	"encoding/json"
	"net/http"

	"github.com/stripe/stripe-go/v79"
)

// What billingd reads of Stripe's answers on the handshake's path (a
// preview, a subscription read, a subscription update) is a dozen fields,
// but stripe-go decodes every answer into its whole object: hundreds of
// fields, maps and nested expandable objects, each with a custom
// UnmarshalJSON. In make bench that decoding was the largest share of
// billingd's own CPU per call after the token check. So these requests
// still go through stripe-go's backend (its form encoding, idempotency
// keys, retries and error decoding are unchanged) but decode the answer into
// the small structs below, which name only the fields billingd reads; the
// rest of the body is skipped by encoding/json. Each struct then yields a
// stripe-go value with just those fields set, so that the code mapping
// Stripe's objects to billing's (previewFromInvoice, invoiceOf, scheduleOf)
// is the one that always read them.
//
// Adding a field to what billingd reads means adding it here:
// TestWireDecodesWhatStripeGoDecodes compares the two decodings of recorded
// answers through those mappings.

// wireInvoice is what billingd reads of an invoice.
type wireInvoice struct {
	stripe.APIResource
	ID                  string `json:"id"`
	AmountDue           int64  `json:"amount_due"`
	Currency            string `json:"currency"`
	BillingReason       string `json:"billing_reason"`
	Created             int64  `json:"created"`
	Subtotal            int64  `json:"subtotal"`
	Total               int64  `json:"total"`
	StartingBalance     int64  `json:"starting_balance"`
	SubscriptionDetails *struct {
		Metadata map[string]string `json:"metadata"`
	} `json:"subscription_details"`
	TotalTaxAmounts []struct {
		Amount    int64 `json:"amount"`
		Inclusive bool  `json:"inclusive"`
	} `json:"total_tax_amounts"`
	Lines *struct {
		HasMore bool `json:"has_more"`
		Data    []struct {
			Amount    int64          `json:"amount"`
			Proration bool           `json:"proration"`
			Period    *stripe.Period `json:"period"`
			Price     *wireRef       `json:"price"`
		} `json:"data"`
	} `json:"lines"`
}

// invoiceRef is an expandable reference to an invoice: the invoice, or
// only its id when unexpanded (as stripe-go reads it). A preview's own
// answer is decoded as a plain wireInvoice: a custom UnmarshalJSON there
// would make encoding/json scan the whole body twice.
type invoiceRef struct{ wireInvoice }

func (r *invoiceRef) UnmarshalJSON(b []byte) error {
	if isID(b) {
		return json.Unmarshal(b, &r.ID)
	}
	return json.Unmarshal(b, &r.wireInvoice)
}

// invoice is w as stripe-go's Invoice, the fields billingd reads set.
func (w *wireInvoice) invoice() *stripe.Invoice {
	inv := &stripe.Invoice{ID: w.ID, AmountDue: w.AmountDue, Currency: stripe.Currency(w.Currency),
		BillingReason: stripe.InvoiceBillingReason(w.BillingReason), Created: w.Created,
		Subtotal: w.Subtotal, Total: w.Total, StartingBalance: w.StartingBalance}
	if w.SubscriptionDetails != nil {
		inv.SubscriptionDetails = &stripe.InvoiceSubscriptionDetails{Metadata: w.SubscriptionDetails.Metadata}
	}
	for _, t := range w.TotalTaxAmounts {
		inv.TotalTaxAmounts = append(inv.TotalTaxAmounts, &stripe.InvoiceTotalTaxAmount{Amount: t.Amount, Inclusive: t.Inclusive})
	}
	if w.Lines != nil {
		inv.Lines = &stripe.InvoiceLineItemList{ListMeta: stripe.ListMeta{HasMore: w.Lines.HasMore},
			Data: make([]*stripe.InvoiceLineItem, len(w.Lines.Data))}
		for i, l := range w.Lines.Data {
			inv.Lines.Data[i] = &stripe.InvoiceLineItem{Amount: l.Amount, Proration: l.Proration, Period: l.Period,
				Price: l.Price.price()}
		}
	}
	return inv
}

// wireSubscription is what billingd reads of a subscription.
type wireSubscription struct {
	stripe.APIResource
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	CancelAtPeriodEnd bool              `json:"cancel_at_period_end"`
	CanceledAt        int64             `json:"canceled_at"`
	CurrentPeriodEnd  int64             `json:"current_period_end"`
	Metadata          map[string]string `json:"metadata"`
	LatestInvoice     *invoiceRef       `json:"latest_invoice"`
	// Schedule is decoded by stripe-go when there is one: billingd reads
	// most of a schedule, and only a subscription with a change scheduled
	// has one.
	Schedule json.RawMessage `json:"schedule"`
	Items    *struct {
		HasMore bool `json:"has_more"`
		Data    []struct {
			ID       string   `json:"id"`
			Quantity int64    `json:"quantity"`
			Price    *wireRef `json:"price"`
		} `json:"data"`
	} `json:"items"`
}

// subscription is w as stripe-go's Subscription, the fields billingd reads
// set.
func (w *wireSubscription) subscription() (*stripe.Subscription, error) {
	sub := &stripe.Subscription{ID: w.ID, Status: stripe.SubscriptionStatus(w.Status),
		CancelAtPeriodEnd: w.CancelAtPeriodEnd, CanceledAt: w.CanceledAt,
		CurrentPeriodEnd: w.CurrentPeriodEnd, Metadata: w.Metadata}
	if w.LatestInvoice != nil {
		sub.LatestInvoice = w.LatestInvoice.invoice()
	}
	if len(w.Schedule) > 0 && string(w.Schedule) != "null" {
		sub.Schedule = &stripe.SubscriptionSchedule{}
		if err := json.Unmarshal(w.Schedule, sub.Schedule); err != nil {
			return nil, err
		}
	}
	if w.Items != nil {
		sub.Items = &stripe.SubscriptionItemList{ListMeta: stripe.ListMeta{HasMore: w.Items.HasMore},
			Data: make([]*stripe.SubscriptionItem, len(w.Items.Data))}
		for i, it := range w.Items.Data {
			sub.Items.Data[i] = &stripe.SubscriptionItem{ID: it.ID, Quantity: it.Quantity, Price: it.Price.price()}
		}
	}
	return sub, nil
}

// wireRef is an object billingd reads only the id of (a price).
type wireRef struct {
	ID string `json:"id"`
}

// UnmarshalJSON reads the object's id, or the id an unexpanded reference
// is.
func (r *wireRef) UnmarshalJSON(b []byte) error {
	if isID(b) {
		return json.Unmarshal(b, &r.ID)
	}
	type plain wireRef
	return json.Unmarshal(b, (*plain)(r))
}

func (r *wireRef) price() *stripe.Price {
	if r == nil {
		return nil
	}
	return &stripe.Price{ID: r.ID}
}

// isID reports whether b, a JSON value, is a string: an unexpanded
// reference.
func isID(b []byte) bool { return len(b) > 0 && b[0] == '"' }

// callSlim sends one request through stripe-go's backend, as its clients
// would, and decodes the answer into v, one of the structs above.
func (p *Provider) callSlim(method, path string, params stripe.ParamsContainer, v stripe.LastResponseSetter) error {
	return p.backend.Call(method, path, p.key, params, v)
}

// previewInvoice is Invoices.CreatePreview, decoded into a wireInvoice.
func (p *Provider) previewInvoice(params *stripe.InvoiceCreatePreviewParams) (*stripe.Invoice, error) {
	var w wireInvoice
	if err := p.callSlim(http.MethodPost, "/v1/invoices/create_preview", params, &w); err != nil {
		return nil, err
	}
	return w.invoice(), nil
}

// subscriptionCall is Subscriptions.Get (GET) or Update (POST), decoded
// into a wireSubscription.
func (p *Provider) subscriptionCall(method, id string, params *stripe.SubscriptionParams) (*stripe.Subscription, error) {
	var w wireSubscription
	if err := p.callSlim(method, stripe.FormatURLPath("/v1/subscriptions/%s", id), params, &w); err != nil {
		return nil, err
	}
	return w.subscription()
}

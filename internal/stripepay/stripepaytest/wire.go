package stripepaytest

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The JSON shapes of Stripe's objects, cut down to the fields stripe-go's
// types need for what billingd reads. Timestamps are Unix seconds.

type listJSON[T any] struct {
	Object  string `json:"object"` // "list"
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

type customerJSON struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Created  int64             `json:"created"`
	Name     string            `json:"name"`
	Email    string            `json:"email"`
	Metadata map[string]string `json:"metadata"`
	Livemode bool              `json:"livemode"`
}

type recurringJSON struct {
	Interval      string `json:"interval"`
	IntervalCount int64  `json:"interval_count"`
}

type priceJSON struct {
	ID         string        `json:"id"`
	Object     string        `json:"object"`
	Active     bool          `json:"active"`
	Currency   string        `json:"currency"`
	UnitAmount int64         `json:"unit_amount"`
	Type       string        `json:"type"`
	Recurring  recurringJSON `json:"recurring"`
}

type subscriptionItemJSON struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	Created      int64             `json:"created"`
	Price        priceJSON         `json:"price"`
	Quantity     int64             `json:"quantity"`
	Subscription string            `json:"subscription"`
	Metadata     map[string]string `json:"metadata"`
}

type subscriptionJSON struct {
	ID                 string                         `json:"id"`
	Object             string                         `json:"object"`
	Status             string                         `json:"status"`
	Customer           string                         `json:"customer"`
	Created            int64                          `json:"created"`
	StartDate          int64                          `json:"start_date"`
	CurrentPeriodStart int64                          `json:"current_period_start"`
	CurrentPeriodEnd   int64                          `json:"current_period_end"`
	Currency           string                         `json:"currency"`
	Items              listJSON[subscriptionItemJSON] `json:"items"`
	Metadata           map[string]string              `json:"metadata"`
	Livemode           bool                           `json:"livemode"`
	// LatestInvoice is the invoice's id, or the invoice itself when the
	// request asked for expand[]=latest_invoice; null when there is none.
	LatestInvoice any `json:"latest_invoice"`
	// Schedule is the attached subscription schedule's id, or the
	// schedule itself with expand[]=schedule; null when there is none.
	Schedule any `json:"schedule"`
	// The cancellation (cancel.go); Stripe sends null for a time not set.
	CancelAtPeriodEnd   bool                    `json:"cancel_at_period_end"`
	CancelAt            *int64                  `json:"cancel_at"`
	CanceledAt          *int64                  `json:"canceled_at"`
	EndedAt             *int64                  `json:"ended_at"`
	CancellationDetails cancellationDetailsJSON `json:"cancellation_details"`
}

// cancellationDetailsJSON is Stripe's cancellation_details: each field
// null until set.
type cancellationDetailsJSON struct {
	Comment  *string `json:"comment"`
	Feedback *string `json:"feedback"`
	Reason   *string `json:"reason"`
}

type periodJSON struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

type lineJSON struct {
	ID           string     `json:"id"`
	Object       string     `json:"object"`
	Amount       int64      `json:"amount"`
	Currency     string     `json:"currency"`
	Description  string     `json:"description"`
	Period       periodJSON `json:"period"`
	Price        priceJSON  `json:"price"`
	Proration    bool       `json:"proration"`
	Quantity     int64      `json:"quantity"`
	Subscription string     `json:"subscription"`
	Type         string     `json:"type"`
}

type invoiceJSON struct {
	ID              string             `json:"id"`
	Object          string             `json:"object"`
	Status          string             `json:"status"`
	BillingReason   string             `json:"billing_reason"`
	Customer        string             `json:"customer"`
	Subscription    string             `json:"subscription"`
	Currency        string             `json:"currency"`
	Created         int64              `json:"created"`
	PeriodStart     int64              `json:"period_start"`
	PeriodEnd       int64              `json:"period_end"`
	Subtotal        int64              `json:"subtotal"`
	Total           int64              `json:"total"`
	AmountDue       int64              `json:"amount_due"`
	AmountRemaining int64              `json:"amount_remaining"`
	Lines           listJSON[lineJSON] `json:"lines"`
	Livemode        bool               `json:"livemode"`
	// Totals of discounts, tax and the customer balance (invoice.go).
	SubtotalExcludingTax int64                `json:"subtotal_excluding_tax"`
	TotalExcludingTax    int64                `json:"total_excluding_tax"`
	Tax                  int64                `json:"tax"`
	StartingBalance      int64                `json:"starting_balance"`
	TotalDiscountAmounts []discountAmountJSON `json:"total_discount_amounts"`
	TotalTaxAmounts      []taxAmountJSON      `json:"total_tax_amounts"`
	// SubscriptionDetails snapshots the subscription's metadata when an
	// update made the invoice.
	SubscriptionDetails *subscriptionDetailsJSON `json:"subscription_details,omitempty"`
}

type subscriptionDetailsJSON struct {
	Metadata map[string]string `json:"metadata"`
}

func newList[T any](url string, data []T) listJSON[T] {
	if data == nil {
		data = []T{} // Stripe sends [], never null
	}
	return listJSON[T]{Object: "list", Data: data, URL: url}
}

func toCustomerJSON(c *customer) customerJSON {
	return customerJSON{
		ID: c.id, Object: "customer", Created: c.created.Unix(),
		Name: c.name, Email: c.email, Metadata: orEmpty(c.metadata),
	}
}

func toPriceJSON(p price) priceJSON {
	return priceJSON{
		ID: p.id, Object: "price", Active: true, Currency: p.currency, UnitAmount: p.unitAmount,
		Type: "recurring", Recurring: recurringJSON{Interval: "month", IntervalCount: 1},
	}
}

// toSubscriptionJSON renders sub, its latest invoice and its schedule
// expanded if r asks for them (r may be nil); callers hold s.mu (prices,
// invoices, schedules).
func (s *Server) toSubscriptionJSON(sub *Subscription, r *http.Request) subscriptionJSON {
	items := make([]subscriptionItemJSON, len(sub.Items))
	for i, it := range sub.Items {
		items[i] = subscriptionItemJSON{
			ID: it.ID, Object: "subscription_item", Created: sub.Created.Unix(),
			Price: toPriceJSON(s.prices[it.PriceID]), Quantity: it.Quantity,
			Subscription: sub.ID, Metadata: map[string]string{},
		}
	}
	return subscriptionJSON{
		ID: sub.ID, Object: "subscription", Status: sub.Status, Customer: sub.Customer,
		Created: sub.Created.Unix(), StartDate: sub.Created.Unix(),
		CurrentPeriodStart: sub.CurrentPeriodStart.Unix(), CurrentPeriodEnd: sub.CurrentPeriodEnd.Unix(),
		Currency:      s.currency(sub),
		Items:         newList("/v1/subscription_items?subscription="+sub.ID, items),
		Metadata:      orEmpty(sub.Metadata),
		LatestInvoice: s.latestInvoice(sub, r),
		Schedule:      s.schedule(sub, r),

		CancelAtPeriodEnd: sub.CancelAtPeriodEnd,
		CancelAt:          unixOrNil(sub.CancelAt), CanceledAt: unixOrNil(sub.CanceledAt), EndedAt: unixOrNil(sub.EndedAt),
		CancellationDetails: cancellationDetailsJSON{Comment: stringOrNil(sub.CancellationDetails.Comment),
			Feedback: stringOrNil(sub.CancellationDetails.Feedback), Reason: stringOrNil(sub.CancellationDetails.Reason)},
	}
}

func stringOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// latestInvoice is sub's latest_invoice field: nil, its id, or the invoice
// when r asks for expand[]=latest_invoice.
func (s *Server) latestInvoice(sub *Subscription, r *http.Request) any {
	inv, ok := s.invoices[sub.LatestInvoice]
	if !ok {
		return nil
	}
	if r != nil && expands(r, "latest_invoice") {
		return inv
	}
	return inv.ID
}

// expands reports whether r asks to expand field: expand[]=field, or
// expand[0]=field as stripe-go writes it (in the query or the form).
func expands(r *http.Request, field string) bool {
	for name, values := range r.Form {
		if (name == "expand" || strings.HasPrefix(name, "expand[")) && slices.Contains(values, field) {
			return true
		}
	}
	return false
}

// currency is the subscription's currency: that of its items' prices, which
// the fake keeps equal. Callers hold s.mu.
func (s *Server) currency(sub *Subscription) string {
	if len(sub.Items) == 0 {
		return ""
	}
	return s.prices[sub.Items[0].PriceID].currency
}

// orEmpty is a copy of m, never nil: the answer is encoded after s.mu is
// released, while another request may write the subscription's metadata.
func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

type currentPhaseJSON struct {
	StartDate int64 `json:"start_date"`
	EndDate   int64 `json:"end_date"`
}

type phaseItemJSON struct {
	Price    string            `json:"price"`
	Quantity int64             `json:"quantity"`
	Metadata map[string]string `json:"metadata"`
}

type phaseJSON struct {
	StartDate         int64             `json:"start_date"`
	EndDate           int64             `json:"end_date"`
	Currency          string            `json:"currency"`
	Items             []phaseItemJSON   `json:"items"`
	ProrationBehavior string            `json:"proration_behavior"`
	Metadata          map[string]string `json:"metadata"`
}

type scheduleJSON struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	Created      int64             `json:"created"`
	Customer     string            `json:"customer"`
	Status       string            `json:"status"`
	EndBehavior  string            `json:"end_behavior"`
	CurrentPhase *currentPhaseJSON `json:"current_phase"`
	Phases       []phaseJSON       `json:"phases"`
	Metadata     map[string]string `json:"metadata"`
	// Subscription is the subscription's id, the subscription itself
	// when the request asked for expand[]=subscription, or null once
	// released.
	Subscription         any     `json:"subscription"`
	ReleasedSubscription *string `json:"released_subscription"`
	ReleasedAt           *int64  `json:"released_at"`
	CanceledAt           *int64  `json:"canceled_at"`
	CompletedAt          *int64  `json:"completed_at"`
	Livemode             bool    `json:"livemode"`
	TestClock            *string `json:"test_clock"`
}

// toScheduleJSON renders sch, its subscription expanded if r asks for it
// (r may be nil); callers hold s.mu.
func (s *Server) toScheduleJSON(sch *Schedule, r *http.Request) scheduleJSON {
	out := scheduleJSON{
		ID: sch.ID, Object: "subscription_schedule", Created: sch.Created.Unix(), Customer: sch.Customer,
		Status: sch.Status, EndBehavior: sch.EndBehavior, Metadata: orEmpty(sch.Metadata),
		Phases:     make([]phaseJSON, len(sch.Phases)),
		ReleasedAt: unixOrNil(sch.ReleasedAt), CanceledAt: unixOrNil(sch.CanceledAt), CompletedAt: unixOrNil(sch.CompletedAt),
	}
	for i, p := range sch.Phases {
		items := make([]phaseItemJSON, len(p.Items))
		for j, it := range p.Items {
			items[j] = phaseItemJSON{Price: it.PriceID, Quantity: it.Quantity, Metadata: map[string]string{}}
		}
		out.Phases[i] = phaseJSON{StartDate: p.Start.Unix(), EndDate: p.End.Unix(), Items: items,
			Currency: s.prices[p.Items[0].PriceID].currency, ProrationBehavior: p.ProrationBehavior,
			Metadata: map[string]string{}}
	}
	if sch.Status == "active" {
		cur := sch.Phases[sch.Current]
		out.CurrentPhase = &currentPhaseJSON{StartDate: cur.Start.Unix(), EndDate: cur.End.Unix()}
	}
	if sch.ReleasedSubscription != "" {
		out.ReleasedSubscription = &sch.ReleasedSubscription
	}
	if sub, ok := s.subs[sch.Subscription]; ok {
		out.Subscription = sub.ID
		if r != nil && expands(r, "subscription") {
			out.Subscription = s.toSubscriptionJSON(sub, nil)
		}
	}
	return out
}

// schedule is sub's schedule field: nil, its id, or the schedule when r
// asks for expand[]=schedule. Callers hold s.mu.
func (s *Server) schedule(sub *Subscription, r *http.Request) any {
	sch, ok := s.schedules[sub.Schedule]
	if !ok {
		return nil
	}
	if r != nil && expands(r, "schedule") {
		return s.toScheduleJSON(sch, nil)
	}
	return sch.ID
}

func unixOrNil(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	sec := t.Unix()
	return &sec
}

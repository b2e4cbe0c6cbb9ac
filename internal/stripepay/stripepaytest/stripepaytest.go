// Package stripepaytest is an in-process fake of the few Stripe endpoints
// billingd uses, for tests, benchmarks and billingd dev. It lives next to
// the adapter it stands in for, as net/http/httptest does.
//
// Unlike stripe-mock, which is stateless and ignores idempotency keys, the
// fake keeps customers and subscriptions in memory and honours
// Idempotency-Key the way Stripe documents it: the first response for a key
// is saved once the endpoint has started executing and is replayed, with
// Idempotent-Replayed: true, for every later request with that key; the same
// key with other parameters or another path is a 400 idempotency_error; a
// request whose key is still in flight is a 409. That is what billingd's
// "never change a subscription twice" promise rests on, and what its tests
// need to exercise, together with the faults of FailNext: a declined card, a
// 500, a response lost after the change was made, a slow answer, a request
// held in flight.
//
// Endpoints (form-encoded, as stripe-go sends them):
//
//	POST /v1/customers
//	POST /v1/subscriptions
//	POST /v1/subscriptions/{id}
//	GET  /v1/subscriptions/{id}              (expand[]: latest_invoice, schedule)
//	DELETE /v1/subscriptions/{id}            (prorate, invoice_now, cancellation_details)
//	POST /v1/invoices/create_preview
//	POST /v1/subscription_schedules          (from_subscription only)
//	POST /v1/subscription_schedules/{id}     (phases, end_behavior, metadata)
//	GET  /v1/subscription_schedules/{id}
//	POST /v1/subscription_schedules/{id}/release
//	POST /v1/subscription_schedules/{id}/cancel
//
// The schedule endpoints accept expand[]=subscription (schedule.go says
// what of Stripe's schedules the fake models; cancel.go what of
// cancellations). AdvanceClock moves the fake's time like a Stripe test
// clock (renewal.go): subscriptions renew, with a renewal invoice, or end
// if set to cancel at the period's end, and schedules move into their
// next phase.
//
// Server.Pacer gives it Stripe's pace (pace.go): per-endpoint latency with
// a tail, the 429s of Stripe's limiters (rate limit, lock timeout), and
// requests held until a test releases them; NewPacer puts the same in front
// of any other stand-in (make bench's canned answers).
//
// The fake is deliberately small: statuses active and canceled, 30-day
// periods that renew only when AdvanceClock passes their end, changes of
// existing items' prices and quantities and of the cancellation as the
// only subscription updates, invoices paid at once and no charges kept. Any request needs an Authorization header with some bearer key;
// which one is not checked.
package stripepaytest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Subscription is a snapshot of a subscription held by the fake.
type Subscription struct {
	ID                 string
	Customer           string
	Status             string
	Created            time.Time
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	Items              []Item
	Metadata           map[string]string
	// LatestInvoice is the id of the subscription's latest invoice, if any.
	LatestInvoice string
	// Schedule is the id of the subscription schedule attached to it, if
	// any (schedule.go).
	Schedule string
	// The cancellation (cancel.go). CancelAtPeriodEnd: the subscription
	// ends instead of renewing, at CancelAt (its current period's end).
	// CanceledAt is when the cancellation was asked for, EndedAt when the
	// subscription ended (status canceled); zero for none.
	CancelAtPeriodEnd   bool
	CancelAt            time.Time
	CanceledAt          time.Time
	EndedAt             time.Time
	CancellationDetails CancellationDetails
	// PendingProrations is the net of the proration items changes made
	// with create_prorations left for the next invoice (positive: owed,
	// negative: a credit), as Stripe's pending invoice items.
	PendingProrations int64
}

// CancellationDetails is why a subscription was canceled, as Stripe's
// cancellation_details: Reason is Stripe's (cancellation_requested when
// asked through the API or the dashboard), Feedback and Comment the
// customer's.
type CancellationDetails struct {
	Reason, Feedback, Comment string
}

// Item is one subscription item.
type Item struct {
	ID       string
	PriceID  string
	Quantity int64
}

// Server is the fake. Its methods are safe for concurrent use, also while
// requests are being served.
type Server struct {
	handler http.Handler
	pacer   *Pacer // Stripe's pace in front of the endpoints (pace.go)

	mu    sync.Mutex
	clock func() time.Time
	// offset is how far AdvanceClock has moved the fake's time past clock's.
	offset    time.Duration
	seq       int64
	prices    map[string]price
	customers map[string]*customer
	subs      map[string]*Subscription
	schedules map[string]*Schedule
	updates   map[string]int
	requests  map[Endpoint]int
	faults    map[Endpoint][]Fault
	faultsFor map[string][]Fault // by subscription (made.go)
	alwaysFor map[string]Fault   // by subscription, until cleared
	// writes is every write to a subscription, reads every read of one
	// (made.go); writeMu makes a write and the states noted around it
	// one step, so that no other write comes between.
	writes  []Write
	reads   map[string][]time.Time
	writeMu sync.Mutex
	// handling counts the requests being handled, by subscription.
	handling map[string]int
	chaos    func(Endpoint) Fault
	keys     keyStore
	invoices map[string]invoiceJSON
	// invoiceAdjustment is added to the next invoice an update makes.
	invoiceAdjustment int64
	events            []Event
	// invoiceRules: coupons, tax rates, customer balances (invoice.go).
	invoiceRules *invoiceRules
}

type price struct {
	id         string
	unitAmount int64
	currency   string
}

type customer struct {
	id, name, email string
	created         time.Time
	metadata        map[string]string
}

// New returns an empty fake with no prices.
func New() *Server {
	s := &Server{
		clock:     time.Now,
		prices:    map[string]price{},
		customers: map[string]*customer{},
		subs:      map[string]*Subscription{},
		schedules: map[string]*Schedule{},
		updates:   map[string]int{},
		requests:  map[Endpoint]int{},
		faults:    map[Endpoint][]Fault{},
		faultsFor: map[string][]Fault{},
		alwaysFor: map[string]Fault{},
		keys:      newKeyStore(maxStoredKeys),
		invoices:  map[string]invoiceJSON{},
		reads:     map[string][]time.Time{},
		handling:  map[string]int{},
	}
	s.pacer = NewPacer(s.routes())
	s.handler = s.pacer
	return s
}

// Handler serves the fake's API; mount it at the root of a server
// (httptest.NewServer(s.Handler()) or a real listener).
func (s *Server) Handler() http.Handler { return s.handler }

// Pacer gives the fake Stripe's latency, its 429s and held requests.
func (s *Server) Pacer() *Pacer { return s.pacer }

// SetPrice creates or replaces a monthly price.
func (s *Server) SetPrice(id string, unitAmountCents int64, currency string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prices[id] = price{id: id, unitAmount: unitAmountCents, currency: currency}
}

// SetClock replaces the fake's clock (time.Now by default): it dates new
// subscriptions and is the proration date when a request gives none. Time
// AdvanceClock added stays added: the fake's time is now() plus it.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = now
}

// now is the fake's time. Callers hold s.mu.
func (s *Server) now() time.Time { return s.clock().Add(s.offset) }

// UpdateCount is how many times the subscription was actually changed by
// POST /v1/subscriptions/{id}; replayed and refused requests do not count.
func (s *Server) UpdateCount(subscriptionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates[subscriptionID]
}

// RequestCount is how many requests reached endpoint e, replays and refusals
// included.
func (s *Server) RequestCount(e Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[e]
}

// Subscription returns a copy of the subscription, if it exists.
func (s *Server) Subscription(id string) (Subscription, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		return Subscription{}, false
	}
	return sub.clone(), true
}

func (sub *Subscription) clone() Subscription {
	c := *sub
	c.Items = slices.Clone(sub.Items)
	c.Metadata = maps.Clone(sub.Metadata)
	return c
}

// newID returns a fresh id such as "sub_fake000007". Callers hold s.mu.
func (s *Server) newID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_fake%06d", prefix, s.seq)
}

package stripepaytest

import "time"

// Endpoint names one of the fake's endpoints; the value is its route.
type Endpoint string

// The endpoints, as targets for FailNextAt.
const (
	CreateCustomer     Endpoint = "POST /v1/customers"
	CreateSubscription Endpoint = "POST /v1/subscriptions"
	UpdateSubscription Endpoint = "POST /v1/subscriptions/{id}"
	GetSubscription    Endpoint = "GET /v1/subscriptions/{id}"
	CancelSubscription Endpoint = "DELETE /v1/subscriptions/{id}"
	CreatePreview      Endpoint = "POST /v1/invoices/create_preview"
	ListInvoices       Endpoint = "GET /v1/invoices"
	CreateSchedule     Endpoint = "POST /v1/subscription_schedules"
	UpdateSchedule     Endpoint = "POST /v1/subscription_schedules/{id}"
	GetSchedule        Endpoint = "GET /v1/subscription_schedules/{id}"
	ReleaseSchedule    Endpoint = "POST /v1/subscription_schedules/{id}/release"
	CancelSchedule     Endpoint = "POST /v1/subscription_schedules/{id}/cancel"
)

// Fault is a failure injected into one request.
type Fault struct {
	kind  faultKind
	delay time.Duration
}

type faultKind int

const (
	noFault faultKind = iota
	declineCard
	serverError
	loseResponse
	dropConnection
	delayAnswer
	stallExecution
	lingerExecution
	applyThenServerError
	rateLimited
)

// The faults. Like Stripe, the fake saves the outcome of a request that
// reached the endpoint under its idempotency key, so a retry with the same
// key gets the faulty outcome replayed — except where noted.
var (
	// DeclineCard refuses the request with 402 card_error card_declined and
	// changes nothing, as Stripe does for an update with
	// payment_behavior=error_if_incomplete whose invoice cannot be paid.
	DeclineCard = Fault{kind: declineCard}

	// ServerError answers 500 api_error and changes nothing. Stripe saves
	// 500s too: a retry with the same key gets the same 500.
	ServerError = Fault{kind: serverError}

	// LoseResponse performs the request and saves its real response under
	// the idempotency key, then answers 500 instead, as when a proxy loses
	// Stripe's answer. A retry with the same key gets the saved response.
	LoseResponse = Fault{kind: loseResponse}

	// DropConnection performs the request and saves its real response, then
	// closes the connection without answering. Beware: Go's http.Transport
	// silently resends a request carrying an Idempotency-Key when a reused
	// keep-alive connection dies before the answer, so the client may see
	// the replayed response rather than an error; use a client without
	// keep-alives to see the error.
	DropConnection = Fault{kind: dropConnection}

	// ApplyThenServerError performs the request, then saves and answers a
	// 500 instead of its response, as Stripe may when it fails after the
	// change was made: a retry with the same key gets the 500 again, so
	// only reading the subscription back shows the change.
	ApplyThenServerError = Fault{kind: applyThenServerError}

	// RateLimited answers 429 rate_limit before executing anything, and
	// keeps nothing under the key, as Stripe's rate limiter does.
	RateLimited = Fault{kind: rateLimited}
)

// Delay makes the change and saves its response at once, then holds the
// answer back for d, or until the client gives up. A client timeout shorter
// than d thus leaves the change made and its outcome unknown to the client;
// a retry with the same key gets the saved response.
func Delay(d time.Duration) Fault { return Fault{kind: delayAnswer, delay: d} }

// Stall holds the request for d before executing it, its idempotency key in
// flight: a request with the same key meanwhile gets 409. Stripe carries on
// when a client hangs up, and so does the fake: it stops waiting at that
// moment and executes the request anyway, saving the response for a retry.
func Stall(d time.Duration) Fault { return Fault{kind: stallExecution, delay: d} }

// Linger holds the request for d before executing it, its idempotency key
// in flight, and goes on holding it when the client hangs up: the request
// is still running at Stripe while the client, having given up, reads the
// subscription back. It then executes and saves its response for a retry.
func Linger(d time.Duration) Fault { return Fault{kind: lingerExecution, delay: d} }

// FailNext injects f into the next POST /v1/subscriptions/{id} that executes.
func (s *Server) FailNext(f Fault) { s.FailNextAt(UpdateSubscription, f) }

// FailNextAt injects f into the next request that executes at e. Faults
// queue up: each call affects one more request. Replayed and conflicting
// requests do not execute and so do not consume a fault.
func (s *Server) FailNextAt(e Endpoint, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[e] = append(s.faults[e], f)
}

// SetChaos makes pick choose the fault (or NoFault) of every request that
// executes while no fault is queued for its endpoint: random faults for
// chaos tests. pick is called with the fake's lock held and must not call
// the fake; nil turns chaos off.
func (s *Server) SetChaos(pick func(Endpoint) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chaos = pick
}

// NoFault lets a request execute and answer normally.
var NoFault = Fault{}

// takeFault removes and returns the next fault queued for e, if any, or
// asks the chaos picker.
func (s *Server) takeFault(e Endpoint) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	queue := s.faults[e]
	if len(queue) == 0 {
		if s.chaos != nil {
			return s.chaos(e)
		}
		return Fault{}
	}
	s.faults[e] = queue[1:]
	return queue[0]
}

package stripepaytest

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Stripe's pace: what real Stripe adds around any stand-in's answers.
//
// A Pacer sits in front of a Stripe stand-in (the fake, or the benchmark's
// canned answers) and gives each endpoint Stripe's latency, a tail of slow
// answers, the 429s of Stripe's limiters, and requests held until a test
// lets them go. All of it happens before the request reaches the
// endpoint: nothing executes and no idempotency key is claimed meanwhile,
// so a refused request can be sent again under the same key, as with
// Stripe. The fake has one (Server.Pacer); NewPacer wraps any other
// handler.

// Latency is how long Stripe takes to answer at one endpoint: Typical, or
// Tail for a share TailShare of the requests (0.01: one in a hundred).
type Latency struct {
	Typical   time.Duration
	Tail      time.Duration
	TailShare float64
}

// Mean is the average wait of l.
func (l Latency) Mean() time.Duration {
	return time.Duration(float64(l.Typical)*(1-l.TailShare) + float64(l.Tail)*l.TailShare)
}

// Limit is a 429 answered by one of Stripe's limiters before a request
// executes: nothing was done, and Stripe keeps nothing under the
// request's idempotency key.
type Limit struct{ code, message string }

// The limiters' answers.
var (
	// RateLimit is Stripe's rate limiter (code rate_limit): too many
	// requests for the account. Stripe's libraries do not retry it.
	RateLimit = Limit{code: "rate_limit",
		message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."}
	// LockTimeout is an object lock timeout (code lock_timeout): another
	// request held the object. Stripe's libraries retry it (stripe-go when
	// MaxNetworkRetries > 0), under the same idempotency key.
	LockTimeout = Limit{code: "lock_timeout",
		message: "This object cannot be accessed right now because another API request or Stripe process is currently accessing it."}
)

// Pacer is Stripe's pace in front of a stand-in. Its methods are safe for
// concurrent use, also while requests are being served.
type Pacer struct {
	next   http.Handler
	routes *http.ServeMux // resolves a request to its Endpoint

	mu       sync.Mutex
	latency  map[Endpoint]Latency
	limits   map[Endpoint][]Limit
	limited  []string // idempotency keys of the requests a Limit refused
	held     map[Endpoint]chan struct{}
	waiting  map[Endpoint]int
	answered map[Endpoint]int
}

// NewPacer returns a Pacer in front of next, with no latency.
func NewPacer(next http.Handler) *Pacer {
	p := &Pacer{next: next, routes: http.NewServeMux(), latency: map[Endpoint]Latency{},
		limits: map[Endpoint][]Limit{}, held: map[Endpoint]chan struct{}{}, waiting: map[Endpoint]int{},
		answered: map[Endpoint]int{}}
	for _, e := range []Endpoint{CreateCustomer, CreateSubscription, UpdateSubscription, GetSubscription, CancelSubscription, CreatePreview} {
		p.routes.Handle(string(e), next)
	}
	return p
}

// SetLatency makes every later request to e take l (zero: no wait).
func (p *Pacer) SetLatency(e Endpoint, l Latency) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency[e] = l
}

// LimitNext answers the next request to e with l's 429. Limits queue up:
// each call refuses one more request.
func (p *Pacer) LimitNext(e Endpoint, l Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limits[e] = append(p.limits[e], l)
}

// Limited returns the idempotency keys of the requests a Limit refused,
// oldest first ("" for a request without one).
func (p *Pacer) Limited() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.limited...)
}

// Hold keeps every request to e waiting, before it executes, until release
// is called (or its client gives up): Stripe as slow as a test needs, for
// as long as it needs. Waiting tells how many are held.
func (p *Pacer) Hold(e Endpoint) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.held[e] = ch
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.held[e] == ch {
				delete(p.held, e)
			}
			p.mu.Unlock()
			close(ch)
		})
	}
}

// Waiting is the number of requests to e waiting now: held, or in their
// latency.
func (p *Pacer) Waiting(e Endpoint) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[e]
}

// Answered is the number of requests to e the Pacer let through to the
// stand-in (refused ones not included).
func (p *Pacer) Answered(e Endpoint) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered[e]
}

func (p *Pacer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := p.routes.Handler(r)
	e := Endpoint(pattern)
	if e == "" { // not an endpoint of ours: the stand-in answers it
		p.next.ServeHTTP(w, r)
		return
	}
	limit, limited, held, wait := p.admit(e, r.Header.Get("Idempotency-Key"))
	if limited {
		writeLimit(w, limit)
		return
	}
	if held != nil {
		select {
		case <-held:
		case <-r.Context().Done():
		}
	}
	sleep(r.Context(), wait)
	p.mu.Lock()
	p.waiting[e]--
	p.answered[e]++
	p.mu.Unlock()
	p.next.ServeHTTP(w, r)
}

// admit decides what happens to a request to e before it executes: a 429,
// or a wait (held, then the latency).
func (p *Pacer) admit(e Endpoint, key string) (l Limit, limited bool, held chan struct{}, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if queue := p.limits[e]; len(queue) > 0 {
		p.limits[e] = queue[1:]
		p.limited = append(p.limited, key)
		return queue[0], true, nil, 0
	}
	p.waiting[e]++
	lat := p.latency[e]
	wait = lat.Typical
	if lat.TailShare > 0 && rand.Float64() < lat.TailShare {
		wait = lat.Tail
	}
	return Limit{}, false, p.held[e], wait
}

// writeLimit answers l as Stripe does: 429 with an error of type
// invalid_request_error (rate limits) and no Stripe-Should-Retry, so the
// client library decides by the code.
func writeLimit(w http.ResponseWriter, l Limit) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": errorJSON{
		Type: "invalid_request_error", Code: l.code, Message: l.message,
	}})
}

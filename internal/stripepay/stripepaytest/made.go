package stripepaytest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What Stripe did, as evidence billingd cannot write, and faults aimed at
// one subscription. The failpoint sweep (integration/sweep_test.go) judges
// every case from this log and from what its own callers were told, never
// from billingd's records: every write to a subscription — billingd's
// requests, changes in Stripe's dashboard, renewals — with the
// subscription's state just before and just after it, and every read of it.
// It arms a fault for the one subscription its case is about while other
// subscriptions' requests (settlers, other cases) go on.

// The writers that are not an endpoint billingd calls.
const (
	// Dashboard is a change made in Stripe's dashboard (ChangeInDashboard).
	Dashboard Endpoint = "dashboard"
	// Renewal is the subscription's renewal (RenewNow, AdvanceClock).
	Renewal Endpoint = "renewal"
)

// SubState is what a write can change of a subscription: its first item's
// price and quantity, its status (active or canceled), whether it is set
// to cancel at its period's end, and the change its schedule will make at
// the next phase ("" for none).
type SubState struct {
	PriceID           string
	Quantity          int64
	Status            string
	CancelAtPeriodEnd bool
	// Scheduled is the next phase's first item when it differs from the
	// current one: its price, quantity and start ("price_x×1@2026-…Z").
	Scheduled string
}

// Write is one write to a subscription that executed and succeeded (its
// change is made, whatever answer the client then got): not a replay, a
// refusal or a request a fault stopped before it executed. A write whose
// Before equals its After changed nothing (a schedule made from the
// subscription).
type Write struct {
	Endpoint     Endpoint // Dashboard and Renewal for Stripe's own writes
	Subscription string
	// Key is the request's idempotency key ("" for none).
	Key string
	// Arrived is when the request reached the endpoint, At when it
	// executed: a stalled request executes long after it arrived. Both
	// are the wall clock's (not the fake's, which AdvanceClock moves).
	Arrived, At   time.Time
	Before, After SubState
	// Invoice is the invoice the write made ("" for none).
	Invoice string
	// Carried is what the write prorated onto the next invoice instead
	// (create_prorations): positive owed, negative a credit.
	Carried int64
	// Credited is what the write's invoice credited to the customer's
	// balance (a negative total: a cancellation's unused time).
	Credited int64
	// Answered: the client got the write's own answer (not lost, replaced
	// by a 500, cut, or held until the client gave up).
	Answered bool
	// Replied is when the fake sent that answer to a client still waiting
	// for it: how long after Arrived the client waited. Zero when not
	// Answered, for Stripe's own writes (answered to no one), and until
	// the answer is sent.
	Replied time.Time
}

// Changed reports whether the write changed the subscription.
func (w Write) Changed() bool { return w.Before != w.After }

// WritesFor lists every write to the subscription, oldest first.
func (s *Server) WritesFor(subscriptionID string) []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Write
	for _, w := range s.writes {
		if w.Subscription == subscriptionID {
			out = append(out, w)
		}
	}
	return out
}

// ReadsOf lists when the subscription was read (GET), oldest first.
func (s *Server) ReadsOf(subscriptionID string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.reads[subscriptionID]...)
}

// Running counts the requests about the subscription the fake is handling
// now: a test waits for none before it judges what Stripe did (a request
// held at Stripe executes after its client gave up).
func (s *Server) Running(subscriptionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handling[subscriptionID]
}

func (s *Server) running(subscriptionID string, delta int) {
	if subscriptionID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handling[subscriptionID] += delta
}

// stateOf is the subscription's state now. Callers hold s.mu.
func (s *Server) stateOf(subscriptionID string) SubState {
	sub, ok := s.subs[subscriptionID]
	if !ok {
		return SubState{}
	}
	st := SubState{Status: sub.Status, CancelAtPeriodEnd: sub.CancelAtPeriodEnd}
	if len(sub.Items) > 0 {
		st.PriceID, st.Quantity = sub.Items[0].PriceID, sub.Items[0].Quantity
	}
	sch, ok := s.schedules[sub.Schedule]
	if !ok || sch.Current+1 >= len(sch.Phases) || len(sch.Phases[sch.Current+1].Items) == 0 {
		return st
	}
	next := sch.Phases[sch.Current+1]
	item := next.Items[0]
	if item.PriceID != st.PriceID || item.Quantity != st.Quantity {
		st.Scheduled = item.PriceID + "×" + strconv.FormatInt(item.Quantity, 10) + "@" + next.Start.UTC().Format(time.RFC3339)
	}
	return st
}

// writing is a write under way: what the subscription was before it.
type writing struct {
	endpoint      Endpoint
	subscription  string
	key           string
	arrived       time.Time
	before        SubState
	latestInvoice string
	pending       int64 // the subscription's PendingProrations before
}

// beginWrite notes the subscription's state before a write. Callers hold
// s.mu, and keep holding s.writeMu until endWrite.
func (s *Server) beginWrite(e Endpoint, subscriptionID, key string, arrived time.Time) writing {
	w := writing{endpoint: e, subscription: subscriptionID, key: key, arrived: arrived, before: s.stateOf(subscriptionID)}
	if sub, ok := s.subs[subscriptionID]; ok {
		w.latestInvoice, w.pending = sub.LatestInvoice, sub.PendingProrations
	}
	return w
}

// endWrite logs a write that executed and succeeded, and returns its place
// in the log. Callers hold s.mu.
func (s *Server) endWrite(w writing, answered bool) int {
	entry := Write{Endpoint: w.endpoint, Subscription: w.subscription, Key: w.key, Arrived: w.arrived,
		At: time.Now(), Before: w.before, After: s.stateOf(w.subscription), Answered: answered}
	if sub, ok := s.subs[w.subscription]; ok {
		if sub.LatestInvoice != w.latestInvoice {
			entry.Invoice = sub.LatestInvoice
			entry.Credited = max(-s.invoices[entry.Invoice].Total, 0)
		}
		entry.Carried = sub.PendingProrations - w.pending
	}
	s.writes = append(s.writes, entry)
	return len(s.writes) - 1
}

// delivered notes what came of the answer to the write at i: sent at
// replied, or never got, when the client had already gone.
func (s *Server) delivered(i int, replied time.Time, clientGone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if clientGone {
		s.writes[i].Answered = false
	}
	if s.writes[i].Answered {
		s.writes[i].Replied = replied
	}
}

// noteRead logs a read of the subscription.
func (s *Server) noteRead(subscriptionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[subscriptionID] = append(s.reads[subscriptionID], time.Now())
}

// FailNextFor injects f into the next request about the subscription that
// executes, at whatever endpoint; these come before FailNextAt's faults.
func (s *Server) FailNextFor(subscriptionID string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultsFor[subscriptionID] = append(s.faultsFor[subscriptionID], f)
}

// FailNextForAt injects f into the next request about the subscription
// that executes at e; these come before FailNextFor's.
func (s *Server) FailNextForAt(subscriptionID string, e Endpoint, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := subscriptionID + " " + string(e)
	s.faultsFor[key] = append(s.faultsFor[key], f)
}

// ClearFaultsFor drops the faults still queued or set for the
// subscription, at any endpoint.
func (s *Server) ClearFaultsFor(subscriptionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.faultsFor {
		if key == subscriptionID || strings.HasPrefix(key, subscriptionID+" ") {
			delete(s.faultsFor, key)
		}
	}
	delete(s.alwaysFor, subscriptionID)
}

// FailAlwaysFor makes every request about the subscription fail with f
// until ClearFaultsFor.
func (s *Server) FailAlwaysFor(subscriptionID string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alwaysFor[subscriptionID] = f
}

// subscriptionOf is the subscription a request is about, if the fake
// knows it: the path's, the preview's or new schedule's parameter, or the
// schedule's.
func (s *Server) subscriptionOf(e Endpoint, r *http.Request) string {
	switch e {
	case UpdateSubscription, GetSubscription, CancelSubscription:
		return r.PathValue("id")
	case CreatePreview:
		return r.Form.Get("subscription")
	case CreateSchedule:
		return r.Form.Get("from_subscription")
	case UpdateSchedule, GetSchedule, ReleaseSchedule, CancelSchedule:
		s.mu.Lock()
		defer s.mu.Unlock()
		if sch, ok := s.schedules[r.PathValue("id")]; ok {
			if sch.Subscription != "" {
				return sch.Subscription
			}
			return sch.ReleasedSubscription
		}
	}
	return ""
}

// takeFaultFor is the fault aimed at the subscription's requests at e, if
// any. A card decline waits for a request that can charge: a POST (a
// cancellation only ever credits).
func (s *Server) takeFaultFor(subscriptionID string, e Endpoint) (Fault, bool) {
	if subscriptionID == "" {
		return Fault{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.alwaysFor[subscriptionID]; ok {
		return f, true
	}
	for _, key := range []string{subscriptionID + " " + string(e), subscriptionID} {
		if queue := s.faultsFor[key]; len(queue) > 0 && !(queue[0].kind == declineCard && !strings.HasPrefix(string(e), "POST ")) {
			s.faultsFor[key] = queue[1:]
			return queue[0], true
		}
	}
	return Fault{}, false
}

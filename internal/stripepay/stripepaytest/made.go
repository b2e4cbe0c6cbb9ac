package stripepaytest

import (
	"net/http"
	"strings"
	"time"
)

// What the fake made, and faults aimed at one subscription: the failpoint
// sweep (integration/sweep_test.go) judges every case by what Stripe
// really did, and arms a fault for the one subscription its case is about
// while other subscriptions' requests (settlers, other cases) go on.

// Made is a request that executed at the fake and succeeded (its change is
// made, whatever answer the client then got): not a replay, a refusal or a
// request a fault stopped before it executed.
type Made struct {
	Endpoint     Endpoint
	Subscription string
	// Key is the request's idempotency key ("" for none).
	Key string
	At  time.Time // the wall clock's (not the fake's, which AdvanceClock moves)
	// LatestInvoice is the subscription's latest invoice right after the
	// request (an update that invoiced made it).
	LatestInvoice string
	// PriceID is the subscription's price right after the request.
	PriceID string
}

// MadeFor lists what executed for the subscription, oldest first.
func (s *Server) MadeFor(subscriptionID string) []Made {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Made
	for _, m := range s.made {
		if m.Subscription == subscriptionID {
			out = append(out, m)
		}
	}
	return out
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
	case UpdateSubscription, GetSubscription:
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
// any. A card decline waits for a request that can charge (a POST).
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
		if queue := s.faultsFor[key]; len(queue) > 0 && !(queue[0].kind == declineCard && strings.HasPrefix(string(e), "GET ")) {
			s.faultsFor[key] = queue[1:]
			return queue[0], true
		}
	}
	return Fault{}, false
}

// noteMade records a request that executed and succeeded.
func (s *Server) noteMade(e Endpoint, subscriptionID, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Made{Endpoint: e, Subscription: subscriptionID, Key: key, At: time.Now()}
	if sub, ok := s.subs[subscriptionID]; ok {
		m.LatestInvoice = sub.LatestInvoice
		if len(sub.Items) > 0 {
			m.PriceID = sub.Items[0].PriceID
		}
	}
	s.made = append(s.made, m)
}

// RenewNow brings the subscription's renewal to now, as if its period had
// been due to end this instant: the subscription's period and its
// schedule's phases move back by what was left of the period, then it
// renews (and a scheduled change applies) as AdvanceClock renews it. Other
// subscriptions, and the fake's clock, stay as they are: a test renews one
// subscription without moving Stripe's time away from the database's.
func (s *Server) RenewNow(subscriptionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subscriptionID]
	if !ok || sub.Status != "active" {
		return
	}
	left := sub.CurrentPeriodEnd.Sub(s.now())
	sub.CurrentPeriodStart, sub.CurrentPeriodEnd = sub.CurrentPeriodStart.Add(-left), sub.CurrentPeriodEnd.Add(-left)
	if sch, ok := s.schedules[sub.Schedule]; ok {
		for i := range sch.Phases {
			sch.Phases[i].Start = sch.Phases[i].Start.Add(-left)
			if !sch.Phases[i].End.IsZero() {
				sch.Phases[i].End = sch.Phases[i].End.Add(-left)
			}
		}
	}
	s.renew(sub)
}

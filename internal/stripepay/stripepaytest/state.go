package stripepaytest

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// State is what the fake knows about customers, subscriptions and their
// schedules, so that a process serving the fake (billingd dev) can keep it
// across restarts.
// Prices and pending faults are not part of it: the process sets prices
// from its catalog, and faults belong to tests. Neither are saved
// idempotency keys: after a restart, a retried request executes again.
type State struct {
	Seq           int64 // the last number handed out in an id
	Customers     []Customer
	Subscriptions []Subscription
	Schedules     []Schedule
	Updates       map[string]int // UpdateCount per subscription
}

// Customer is a snapshot of a customer held by the fake.
type Customer struct {
	ID, Name, Email string
	Created         time.Time
	Metadata        map[string]string
}

// State returns a copy of the fake's customers, subscriptions and
// schedules, ordered by id.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Seq: s.seq, Updates: maps.Clone(s.updates)}
	for _, c := range s.customers {
		st.Customers = append(st.Customers, Customer{ID: c.id, Name: c.name, Email: c.email,
			Created: c.created, Metadata: maps.Clone(c.metadata)})
	}
	for _, sub := range s.subs {
		st.Subscriptions = append(st.Subscriptions, sub.clone())
	}
	for _, sch := range s.schedules {
		st.Schedules = append(st.Schedules, sch.clone())
	}
	slices.SortFunc(st.Schedules, func(a, b Schedule) int { return compareIDs(a.ID, b.ID) })
	slices.SortFunc(st.Customers, func(a, b Customer) int { return compareIDs(a.ID, b.ID) })
	slices.SortFunc(st.Subscriptions, func(a, b Subscription) int { return compareIDs(a.ID, b.ID) })
	return st
}

// Restore replaces the fake's customers, subscriptions and schedules with
// st's, as
// State returned them. Ids handed out afterwards continue from st.Seq.
func (s *Server) Restore(st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = st.Seq
	s.customers = map[string]*customer{}
	for _, c := range st.Customers {
		s.customers[c.ID] = &customer{id: c.ID, name: c.Name, email: c.Email,
			created: c.Created, metadata: maps.Clone(c.Metadata)}
	}
	s.subs = map[string]*Subscription{}
	for _, sub := range st.Subscriptions {
		c := sub.clone()
		s.subs[c.ID] = &c
	}
	s.schedules = map[string]*Schedule{}
	for _, sch := range st.Schedules {
		c := sch.clone()
		s.schedules[c.ID] = &c
	}
	s.updates = maps.Clone(st.Updates)
	if s.updates == nil {
		s.updates = map[string]int{}
	}
}

// compareIDs orders ids such as "sub_fake000007" by length, then
// lexically: in creation order, even past six digits.
func compareIDs(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(a, b))
}

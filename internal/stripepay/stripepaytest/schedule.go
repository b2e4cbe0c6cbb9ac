package stripepaytest

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Subscription schedules, as Stripe documents them (API reference
// "Subscription Schedules": create, update, release, cancel; the
// subscription_schedule object; the "Subscription schedules" guide):
//
//   - A schedule made from_subscription has one phase, the subscription's
//     current period with its items, end_behavior release, status active;
//     the subscription's schedule field names it. from_subscription cannot
//     be combined with phases, customer, start_date or default_settings,
//     and a subscription already attached to a schedule cannot get another.
//   - An update replaces the phases (past phases are omitted): the first
//     one given is the current phase, whose start_date cannot change; a
//     missing start_date is the previous phase's end_date; every phase but
//     the last needs end_date or iterations (the last defaults to one
//     iteration); all prices share the subscription's currency. Only active
//     (or not_started) schedules can be updated, released or canceled.
//   - Release detaches the subscription (subscription null,
//     released_subscription its id, released_at) and leaves it as it is;
//     cancel cancels the subscription too.
//   - At a period's end (AdvanceClock) the subscription moves into the
//     next phase; after the last phase the schedule ends as end_behavior
//     says: release detaches the subscription (status released), cancel
//     cancels it (status completed).
//
// What the fake leaves out: schedules created with phases or for a
// customer (not_started), phase settings other than items, start_date,
// end_date, iterations and proration_behavior, and phase boundaries that
// do not fall on one of the subscription's period ends (Stripe would
// prorate them; the fake refuses them). Changing the current phase's items
// applies them to the subscription at once, only with proration_behavior
// none. When a phase starts, the subscription's items keep their ids,
// position by position.

// Schedule is a snapshot of a subscription schedule held by the fake.
type Schedule struct {
	ID       string
	Customer string
	// Subscription is the subscription the schedule manages; "" once it
	// is released (ReleasedSubscription then names it).
	Subscription         string
	ReleasedSubscription string
	Status               string // active, released, canceled or completed
	EndBehavior          string // release or cancel
	Created              time.Time
	ReleasedAt           time.Time
	CanceledAt           time.Time
	CompletedAt          time.Time
	Phases               []Phase
	// Current is the index in Phases of the current phase.
	Current  int
	Metadata map[string]string
}

// Phase is one phase of a schedule: the subscription's items from Start
// to End.
type Phase struct {
	Start, End        time.Time
	Items             []PhaseItem
	ProrationBehavior string
}

// PhaseItem is a price and quantity of a phase.
type PhaseItem struct {
	PriceID  string
	Quantity int64
}

func (sch *Schedule) clone() Schedule {
	c := *sch
	c.Metadata = maps.Clone(sch.Metadata)
	c.Phases = make([]Phase, len(sch.Phases))
	for i, p := range sch.Phases {
		c.Phases[i] = p
		c.Phases[i].Items = slices.Clone(p.Items)
	}
	return c
}

// live reports whether the schedule can still be updated, released or
// canceled.
func (sch *Schedule) live() bool { return sch.Status == "active" || sch.Status == "not_started" }

// Schedule returns a copy of the subscription schedule, if it exists.
func (s *Server) Schedule(id string) (Schedule, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, ok := s.schedules[id]
	if !ok {
		return Schedule{}, false
	}
	return sch.clone(), true
}

// createSchedule: POST /v1/subscription_schedules with from_subscription
// (and optionally end_behavior, metadata).
func (s *Server) createSchedule(r *http.Request) (any, error) {
	f := r.PostForm
	subID := f.Get("from_subscription")
	if subID == "" {
		return nil, errParamInvalid("from_subscription", "the Stripe fake creates subscription schedules from_subscription only")
	}
	for key := range f {
		for _, other := range []string{"phases", "customer", "start_date", "default_settings"} {
			if key == other || strings.HasPrefix(key, other+"[") {
				return nil, errParamInvalid(other, "You cannot set `%s` when `from_subscription` is set.", other)
			}
		}
	}
	endBehavior, err := enumParam(f, "end_behavior", "release", "release", "cancel")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subID]
	if !ok {
		return nil, errNoSuch(http.StatusBadRequest, "from_subscription", "subscription", subID)
	}
	if sub.Schedule != "" {
		return nil, errState("from_subscription",
			"You cannot migrate a subscription that is already attached to a schedule: `%s`.", sub.Schedule)
	}
	if sub.Status == "canceled" {
		return nil, errState("from_subscription", "You cannot migrate a canceled subscription.")
	}
	items := make([]PhaseItem, len(sub.Items))
	for i, it := range sub.Items {
		items[i] = PhaseItem{PriceID: it.PriceID, Quantity: it.Quantity}
	}
	sch := &Schedule{
		ID: s.newID("sub_sched"), Customer: sub.Customer, Subscription: sub.ID,
		Status: "active", EndBehavior: endBehavior, Created: s.now().Truncate(time.Second),
		Phases: []Phase{{Start: sub.CurrentPeriodStart, End: sub.CurrentPeriodEnd, Items: items,
			ProrationBehavior: "create_prorations"}},
		Metadata: hashParams(f, "metadata"),
	}
	s.schedules[sch.ID] = sch
	sub.Schedule = sch.ID
	s.emitObject("subscription_schedule.created", s.toScheduleJSON(sch, nil))
	return s.toScheduleJSON(sch, r), nil
}

// phaseParam is one phase of an update as sent.
type phaseParam struct {
	items             []itemParam
	start, end        time.Time
	startNow, endNow  bool
	hasStart, hasEnd  bool
	iterations        int64
	prorationBehavior string
}

// parsePhases reads phases[i][…]: items[j][price|quantity], start_date and
// end_date (Unix seconds or "now"), iterations, proration_behavior.
func parsePhases(form url.Values) ([]phaseParam, error) {
	entries, err := listParams(form, "phases")
	if err != nil {
		return nil, err
	}
	phases := make([]phaseParam, len(entries))
	for i, fields := range entries {
		param := func(name string) string { return "phases[" + strconv.Itoa(i) + "][" + name + "]" }
		// fields holds "start_date", "items][0][price", …: give the
		// nested ones their brackets back to read them as a form.
		nested := url.Values{}
		p := &phases[i]
		for name, value := range fields {
			if head, rest, ok := strings.Cut(name, "]["); ok {
				nested.Set(head+"["+rest+"]", value)
				if head != "items" {
					return nil, errParamInvalid(param(head), "the Stripe fake does not support %s", param(head))
				}
				continue
			}
			switch name {
			case "start_date":
				p.start, p.startNow, err = timeParam(param(name), value)
				p.hasStart = true
			case "end_date":
				p.end, p.endNow, err = timeParam(param(name), value)
				p.hasEnd = true
			case "iterations":
				p.iterations, err = strconv.ParseInt(value, 10, 64)
				if err != nil || p.iterations < 1 {
					err = errParamInvalid(param(name), "Invalid positive integer: %s", value)
				}
			case "proration_behavior":
				p.prorationBehavior, err = enumParam(url.Values{name: {value}}, name, "", "create_prorations", "always_invoice", "none")
			default:
				err = errParamInvalid(param(name), "the Stripe fake does not support %s", param(name))
			}
			if err != nil {
				return nil, err
			}
		}
		if p.items, err = parseItems(nested, "items"); err != nil {
			return nil, err
		}
		for j, it := range p.items {
			if it.id != "" {
				return nil, errParamInvalid(param("items]["+strconv.Itoa(j)+"][id"), "Received unknown parameter: id")
			}
		}
		if p.hasEnd && p.iterations > 0 {
			return nil, errParamInvalid(param("iterations"), "You may only specify one of these parameters: end_date, iterations.")
		}
	}
	return phases, nil
}

// timeParam reads a timestamp parameter: Unix seconds or "now".
func timeParam(name, value string) (t time.Time, now bool, err error) {
	if value == "now" {
		return time.Time{}, true, nil
	}
	sec, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return time.Time{}, false, errParamInvalid(name, "Invalid timestamp: must be an integer Unix timestamp or \"now\".")
	}
	return time.Unix(sec, 0).UTC(), false, nil
}

// updateSchedule: POST /v1/subscription_schedules/{id} with phases,
// end_behavior, proration_behavior and metadata.
func (s *Server) updateSchedule(r *http.Request) (any, error) {
	f := r.PostForm
	params, err := parsePhases(f)
	if err != nil {
		return nil, err
	}
	_, setsEndBehavior := f["end_behavior"]
	endBehavior, err := enumParam(f, "end_behavior", "", "release", "cancel")
	if err != nil {
		return nil, err
	}
	behavior, err := enumParam(f, "proration_behavior", "create_prorations", "create_prorations", "always_invoice", "none")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, err := s.liveSchedule(r.PathValue("id"), "update")
	if err != nil {
		return nil, err
	}
	sub, ok := s.subs[sch.Subscription]
	if !ok {
		return nil, errState("", "The subscription schedule manages no subscription.")
	}
	if len(params) > 0 {
		phases, err := s.resolvePhases(sch, sub, params)
		if err != nil {
			return nil, err
		}
		if err := s.changeCurrentPhase(sub, phases[0], behavior); err != nil {
			return nil, err
		}
		sch.Phases, sch.Current = phases, 0
	}
	if setsEndBehavior {
		sch.EndBehavior = endBehavior
	}
	mergeMetadata(&sch.Metadata, hashParams(f, "metadata"))
	s.emitObject("subscription_schedule.updated", s.toScheduleJSON(sch, nil))
	return s.toScheduleJSON(sch, r), nil
}

// liveSchedule finds schedule id for op, refusing one that has ended.
// Callers hold s.mu.
func (s *Server) liveSchedule(id, op string) (*Schedule, error) {
	sch, ok := s.schedules[id]
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "schedule", "subscription_schedule", id)
	}
	if !sch.live() {
		return nil, errState("", "You cannot %s a subscription schedule that is currently in the `%s` status. "+
			"It must be in one of the following statuses: `not_started`, `active`.", op, sch.Status)
	}
	return sch, nil
}

// resolvePhases checks an update's phases against the schedule and its
// subscription and dates them. Callers hold s.mu.
func (s *Server) resolvePhases(sch *Schedule, sub *Subscription, params []phaseParam) ([]Phase, error) {
	current := sch.Phases[sch.Current]
	currency := s.currency(sub)
	phases := make([]Phase, len(params))
	for i, p := range params {
		param := func(name string) string { return "phases[" + strconv.Itoa(i) + "][" + name + "]" }
		start := current.Start
		if i > 0 {
			start = phases[i-1].End
		}
		if p.hasStart {
			given := p.start
			if p.startNow {
				given = s.now().Truncate(time.Second)
			}
			switch {
			case i == 0 && !given.Equal(start):
				return nil, errParamInvalid(param("start_date"), "You can not modify the start date of the current phase.")
			case !given.Equal(start):
				return nil, errParamInvalid(param("start_date"),
					"The start_date of a phase must be the end_date of the phase before it: phases must be contiguous.")
			}
		}
		var end time.Time
		switch {
		case p.hasEnd && p.endNow:
			end = s.now().Truncate(time.Second)
		case p.hasEnd:
			end = p.end
		case p.iterations > 0:
			end = start.Add(time.Duration(p.iterations) * period)
		case i == len(params)-1:
			end = start.Add(period) // the last phase defaults to one iteration
		default:
			return nil, errParamInvalid(param("end_date"), "Every phase but the last must have an end_date or iterations.")
		}
		if !end.After(start) {
			return nil, errParamInvalid(param("end_date"), "The end_date of a phase must be after its start_date.")
		}
		if end.Before(sub.CurrentPeriodEnd) || end.Sub(sub.CurrentPeriodEnd)%period != 0 {
			return nil, errParamInvalid(param("end_date"),
				"the Stripe fake supports only phases that end at the end of one of the subscription's periods")
		}
		if len(p.items) == 0 {
			return nil, errParamMissing(param("items"))
		}
		items := make([]PhaseItem, len(p.items))
		for j, it := range p.items {
			name := "phases[" + strconv.Itoa(i) + "][items][" + strconv.Itoa(j) + "][price]"
			if it.price == "" {
				return nil, errParamMissing(name)
			}
			pr, ok := s.prices[it.price]
			if !ok {
				return nil, errNoSuch(http.StatusBadRequest, name, "price", it.price)
			}
			if pr.currency != currency {
				return nil, errParamInvalid(name, "All prices on a subscription schedule must have the same currency.")
			}
			items[j] = PhaseItem{PriceID: pr.id, Quantity: quantityOr1(it)}
		}
		phases[i] = Phase{Start: start, End: end, Items: items, ProrationBehavior: p.prorationBehavior}
		if phases[i].ProrationBehavior == "" {
			phases[i].ProrationBehavior = "create_prorations"
		}
	}
	return phases, nil
}

// changeCurrentPhase applies the current phase's items to the subscription
// when an update changes them; the fake prorates nothing, so it does so
// only with proration_behavior none. Callers hold s.mu.
func (s *Server) changeCurrentPhase(sub *Subscription, current Phase, behavior string) error {
	same := len(current.Items) == len(sub.Items)
	for i := 0; same && i < len(current.Items); i++ {
		same = current.Items[i].PriceID == sub.Items[i].PriceID && current.Items[i].Quantity == sub.Items[i].Quantity
	}
	if same {
		return nil
	}
	if current.ProrationBehavior != "" && current.ProrationBehavior != "create_prorations" {
		behavior = current.ProrationBehavior
	}
	if behavior != "none" {
		return errParamInvalid("phases[0][items]", "the Stripe fake changes the current phase's items only with proration_behavior=none")
	}
	s.setItems(sub, current.Items)
	s.emit("customer.subscription.updated", sub)
	return nil
}

// setItems gives sub the phase's items, keeping item ids position by
// position. Callers hold s.mu.
func (s *Server) setItems(sub *Subscription, items []PhaseItem) {
	next := make([]Item, len(items))
	for i, it := range items {
		id := ""
		if i < len(sub.Items) {
			id = sub.Items[i].ID
		} else {
			id = s.newID("si")
		}
		next[i] = Item{ID: id, PriceID: it.PriceID, Quantity: it.Quantity}
	}
	sub.Items = next
}

// getSchedule: GET /v1/subscription_schedules/{id}.
func (s *Server) getSchedule(r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sch, ok := s.schedules[id]
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "schedule", "subscription_schedule", id)
	}
	return s.toScheduleJSON(sch, r), nil
}

// releaseSchedule: POST /v1/subscription_schedules/{id}/release
// (preserve_cancel_date is accepted; the fake sets no cancel dates).
func (s *Server) releaseSchedule(r *http.Request) (any, error) {
	if v := r.PostForm.Get("preserve_cancel_date"); v != "" && v != "true" && v != "false" {
		return nil, errParamInvalid("preserve_cancel_date", "Invalid boolean: %s", v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, err := s.liveSchedule(r.PathValue("id"), "release")
	if err != nil {
		return nil, err
	}
	s.release(sch, s.now().Truncate(time.Second))
	return s.toScheduleJSON(sch, r), nil
}

// release detaches sch from its subscription at. Callers hold s.mu.
func (s *Server) release(sch *Schedule, at time.Time) {
	if sub, ok := s.subs[sch.Subscription]; ok && sub.Schedule == sch.ID {
		sub.Schedule = ""
	}
	sch.Status, sch.ReleasedAt = "released", at
	sch.ReleasedSubscription, sch.Subscription = sch.Subscription, ""
	s.emitObject("subscription_schedule.released", s.toScheduleJSON(sch, nil))
}

// cancelSchedule: POST /v1/subscription_schedules/{id}/cancel cancels the
// schedule and its subscription (invoice_now and prorate are accepted; the
// fake makes no final invoice).
func (s *Server) cancelSchedule(r *http.Request) (any, error) {
	for _, name := range []string{"invoice_now", "prorate"} {
		if v := r.PostForm.Get(name); v != "" && v != "true" && v != "false" {
			return nil, errParamInvalid(name, "Invalid boolean: %s", v)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sch, err := s.liveSchedule(r.PathValue("id"), "cancel")
	if err != nil {
		return nil, err
	}
	now := s.now().Truncate(time.Second)
	sch.Status, sch.CanceledAt = "canceled", now
	if sub, ok := s.subs[sch.Subscription]; ok {
		s.end(sub, now, now) // cancel.go
	}
	s.emitObject("subscription_schedule.canceled", s.toScheduleJSON(sch, nil))
	return s.toScheduleJSON(sch, r), nil
}

// errState: the object is not in a state that allows the request. Found
// while executing, so the answer is saved under the idempotency key.
func errState(param, format string, args ...any) *apiError {
	e := errParamInvalid(param, format, args...)
	e.code, e.save = "", true
	return e
}

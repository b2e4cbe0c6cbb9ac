package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The sweep's evidence: what the oracle (sweep_oracle_test.go) judges
// from. None of it is billingd's: what Stripe did (the fake's log of every
// write, with the subscription's state around it, and of every read), what
// every caller was told (sweepAnswer, recorded as it arrived), and the
// consent each person gave, recorded by the test as it gave it. billingd's
// own records are read only as a second witness, which must agree.

// sweepState is a subscription as a person is shown it and as Stripe holds
// it: its plan, its seats, and the change scheduled for the period's end
// ("pro@<RFC 3339>", or "pro×5@…" for several seats; "" for none). A
// standing consent names no seats (0): it may change none. ends is how the
// subscription ends: "" renewing, "period_end" cancelled at the period's
// end, "canceled" ended.
type sweepState struct {
	plan, scheduled string
	seats           int64
	ends            string
}

// endsOf is how a subscription of status with cancel_at_period_end ends,
// in the oracle's terms.
func endsOf(status string, cancelAtPeriodEnd bool) string {
	switch {
	case status == "canceled":
		return "canceled"
	case cancelAtPeriodEnd:
		return "period_end"
	}
	return ""
}

func (s sweepState) String() string {
	out := s.plan
	if s.seats > 1 {
		out += fmt.Sprintf(" ×%d", s.seats)
	}
	if s.ends != "" {
		out += " [ends: " + s.ends + "]"
	}
	if s.scheduled == "" {
		return out
	}
	return out + " (scheduled: " + s.scheduled + ")"
}

// seatsSuffix is how a scheduled change names several seats.
func seatsSuffix(n int64) string {
	if n > 1 {
		return fmt.Sprintf("×%d", n)
	}
	return ""
}

// stateAtStripe is a state of the fake's log in the oracle's terms.
func stateAtStripe(st stripepaytest.SubState) sweepState {
	out := sweepState{plan: planOfPrice(st.PriceID), seats: st.Quantity, ends: endsOf(st.Status, st.CancelAtPeriodEnd)}
	if price, at, ok := strings.Cut(st.Scheduled, "@"); ok {
		price, quantity, _ := strings.Cut(price, "×")
		n, _ := strconv.ParseInt(quantity, 10, 64)
		out.scheduled = planOfPrice(price) + seatsSuffix(n) + "@" + at
	}
	return out
}

// sweepConsent is a consent a person gave during a case, as the test gave
// it: to a change shown (a token's summary, an elicitation's form), or
// standing (a mandate's bounds, a policy that lets a change run at once)
// for one request an agent made under it.
type sweepConsent struct {
	kind string // "token", "elicitation", "mandate", "allow"
	who  string
	// confirmation is the change shown's id ("" for a standing consent).
	confirmation string
	// from and to are the state shown and the state agreed to; a standing
	// consent names only to.plan.
	from, to sweepState
	at       time.Time // when the test gave it
	// needsApproval: the proposal said the change waits for approvers;
	// approvedAt is when a person approved it.
	needsApproval bool
	approvedAt    time.Time
	// writes are the Stripe writes it explains (oracle rule 3).
	writes []stripepaytest.Write
}

func (c *sweepConsent) String() string {
	if c.confirmation == "" {
		return fmt.Sprintf("%s consent to %s", c.kind, c.to.plan)
	}
	return fmt.Sprintf("%s consent %s (%s → %s)", c.kind, c.confirmation, c.from, c.to)
}

// standing reports whether the consent is a standing one (no change shown).
func (c *sweepConsent) standing() bool { return c.kind == "mandate" || c.kind == "allow" }

// madeAll reports whether the writes it explains brought about every part
// of the change agreed to.
func (c *sweepConsent) madeAll() bool {
	if c.standing() {
		return len(c.writes) > 0
	}
	planMade, seatsMade, scheduleMade := c.from.plan == c.to.plan, c.from.seats == c.to.seats, c.from.scheduled == c.to.scheduled
	endsMade := c.from.ends == c.to.ends
	for _, w := range c.writes {
		before, after := stateAtStripe(w.Before), stateAtStripe(w.After)
		endsMade = endsMade || after.ends == c.to.ends && (before.ends != after.ends || !w.Changed())
		planMade = planMade || after.plan == c.to.plan && (before.plan != after.plan || !w.Changed())
		seatsMade = seatsMade || after.seats == c.to.seats && (before.seats != after.seats || !w.Changed())
		// The schedule agreed to stands after one of its writes (a change
		// in the dashboard may have made the scheduled change moot
		// already). Keeping the plan is made only on the plan kept: a
		// release after the dashboard moved the price keeps nothing.
		scheduleMade = scheduleMade || after.scheduled == c.to.scheduled && (!c.keeps() || after.plan == c.to.plan && after.seats == c.to.seats)
	}
	return planMade && seatsMade && scheduleMade && endsMade
}

// keeps reports whether c only cancels a scheduled change (a keep).
func (c *sweepConsent) keeps() bool {
	return !c.standing() && c.from.plan == c.to.plan && c.from.seats == c.to.seats && c.from.ends == c.to.ends &&
		c.from.scheduled != "" && c.to.scheduled == ""
}

// ambiguous reports whether billingd cannot know if c's keep was made: its
// release was made on the plan kept, and Stripe's dashboard changed the
// price before billingd could read the subscription again (Stripe's
// release answers with the schedule, not the subscription). Either record
// is then true.
func (c *sweepConsent) ambiguous(writes []stripepaytest.Write, reads []time.Time) bool {
	if !c.keeps() {
		return false
	}
	for _, w := range c.writes {
		if stateAtStripe(w.Before).scheduled == stateAtStripe(w.After).scheduled {
			continue
		}
		readAgain := time.Now()
		for _, r := range reads {
			if r.After(w.At) && r.Before(readAgain) {
				readAgain = r
			}
		}
		for _, d := range writes {
			if d.Endpoint == stripepaytest.Dashboard && d.At.After(w.At) && d.At.Before(readAgain) {
				return true
			}
		}
	}
	return false
}

// shownState is the state a proposal showed and the state it asked to
// agree to.
func shownState(p proposal) (from, to sweepState) {
	d := p.Details
	from, to = sweepState{plan: d.From, seats: d.QuantityFrom}, sweepState{plan: d.To, seats: d.QuantityTo}
	if c := d.CancelsScheduledChange; c != nil {
		seats := d.QuantityFrom // a plan change scheduled keeps them
		if c.Quantity > 0 {
			seats = c.Quantity
		}
		from.scheduled = c.To + seatsSuffix(seats) + "@" + c.At.UTC().Format(time.RFC3339)
	}
	if d.At == "period_end" {
		to = sweepState{plan: d.From, seats: d.QuantityFrom,
			scheduled: d.To + seatsSuffix(d.QuantityTo) + "@" + d.EffectiveAt.UTC().Format(time.RFC3339)}
	}
	// What the change does to the subscription's end (the proposal says
	// it by its operation and cancellation).
	switch d.Cancellation {
	case billing.CancelNow:
		to.ends = "canceled"
	case billing.CancelAtPeriodEnd:
		to.ends = "period_end"
	case billing.Resume:
		from.ends = "period_end"
	}
	return from, to
}

// summaryPlans reads the change a summary shown in an elicitation form
// states: "Upgrade <org> from Pro (…) to Scale (…)".
var summaryPlans = regexp.MustCompile(`from (Free|Pro|Scale) \(.*?\) to (Free|Pro|Scale) \(`)

// consentTo records that the test gave consent now, and returns it: a
// second call sent with a token (the same consent each time it is sent
// again), an elicitation accepted, or an agent's request under a standing
// consent.
func (sc *sweepCase) consentTo(c sweepConsent) *sweepConsent {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if c.confirmation != "" {
		for _, given := range sc.consents {
			if given.confirmation == c.confirmation {
				return given
			}
		}
	}
	c.at = time.Now()
	sc.consents = append(sc.consents, &c)
	return &c
}

// tokenConsent is the consent a second call with the token of shown
// gives.
func (sc *sweepCase) tokenConsent(who string, shown proposal) *sweepConsent {
	from, to := shownState(shown)
	_, _, needsApproval := shown.Details.ApprovalProgress.Counts()
	return sc.consentTo(sweepConsent{kind: "token", who: who, confirmation: shown.ConfirmationID, from: from, to: to,
		needsApproval: needsApproval})
}

// noteShown keeps a proposal a caller was shown, by its confirmation.
func (sc *sweepCase) noteShown(p proposal) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.shown[p.ConfirmationID] = p
}

// approved notes a person's approval of a confirmation, given now.
func (sc *sweepCase) approved(confirmation string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.approvals[confirmation] = time.Now()
}

// caseWrites are the writes to the case's subscription since its setup.
func (sw *sweep) caseWrites(sc *sweepCase) []stripepaytest.Write {
	writes := sw.h.fake.WritesFor(sc.sub)
	return writes[min(sc.setupWrites, len(writes)):]
}

// explain gives every billingd write of the case that changed the
// subscription to the one consent that explains it (oracle rule 3), and
// returns those no consent explains with why.
func (sw *sweep) explain(sc *sweepCase) (unexplained []string) {
	reads := sw.h.fake.ReadsOf(sc.sub)
	writes := sw.caseWrites(sc)
	sc.mu.Lock()
	for _, c := range sc.consents { // judged afresh each time
		c.writes, c.approvedAt = nil, sc.approvals[c.confirmation]
	}
	sc.mu.Unlock()
	var restored time.Time // the last time a released scheduled change was put back
	for i, w := range writes {
		if w.Endpoint == stripepaytest.Dashboard || w.Endpoint == stripepaytest.Renewal {
			continue
		}
		if !w.Changed() {
			// A request of billingd's that found Stripe already as agreed
			// (the dashboard made the same change first) is its consent's.
			sc.noteUnchanged(w)
			continue
		}
		before, after := stateAtStripe(w.Before), stateAtStripe(w.After)
		seen := stateAtStripe(sw.seenBefore(w, writes[:i], reads))
		if sc.restores(seen, after) {
			restored = w.At
			continue
		}
		c, why := sc.consentFor(w, change{before, after, seen, restored})
		if c == nil {
			unexplained = append(unexplained, fmt.Sprintf("%s (%s) took Stripe from %s to %s at %s (billingd last saw %s): %s",
				w.Endpoint, w.Key, before, after, w.At.Format("15:04:05.000"), seen, why))
			continue
		}
		c.writes = append(c.writes, w)
	}
	return unexplained
}

// noteUnchanged gives a write that changed nothing to the consent its key
// names, if the subscription after it is the one agreed to.
func (sc *sweepCase) noteUnchanged(w stripepaytest.Write) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, c := range sc.consents {
		if _, ok := keyOf(w.Key, c.confirmation); ok && c.confirmation != "" && stateAtStripe(w.After).plan == c.to.plan &&
			w.Endpoint == stripepaytest.UpdateSubscription {
			c.writes = append(c.writes, w)
		}
	}
}

// seenBefore is the state billingd could know when it sent w: the state
// before it, unless Stripe's dashboard changed the subscription after
// billingd's last read of it and before w arrived (no request of
// billingd's can tell such a change from none: Stripe has no
// compare-and-set), in which case the state before that change.
func (sw *sweep) seenBefore(w stripepaytest.Write, earlier []stripepaytest.Write, reads []time.Time) stripepaytest.SubState {
	var lastRead time.Time
	for _, r := range reads {
		if r.Before(w.Arrived) {
			lastRead = r
		}
	}
	seen := w.Before
	for i := len(earlier) - 1; i >= 0; i-- {
		d := earlier[i]
		if d.Endpoint == stripepaytest.Dashboard && d.At.After(lastRead) {
			seen = d.Before
		}
	}
	return seen
}

// restores reports whether a write from before (as billingd could know it)
// to after puts back the change that was scheduled when the case began,
// which a change not made had released: it undoes, and needs no consent.
func (sc *sweepCase) restores(before, after sweepState) bool {
	return sc.scheduledBefore != "" && before.plan == after.plan && before.seats == after.seats && before.scheduled == "" &&
		after.scheduled == sc.scheduledBefore
}

// consentFor is the consent that explains a write from before to after:
// the one whose change it is part of, given before the write reached
// Stripe and still holding then; the consent the write's idempotency key
// names first. nil, and why, when there is none.
func (sc *sweepCase) consentFor(w stripepaytest.Write, ch change) (*sweepConsent, string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var candidates []*sweepConsent
	for _, c := range sc.consents {
		if c.fits(ch) && !c.spent(ch, sc.mandate) {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return nil, "no consent was given to that change (or its consent was spent)"
	}
	slices.SortStableFunc(candidates, func(a, b *sweepConsent) int {
		_, aNamed := keyOf(w.Key, a.confirmation)
		_, bNamed := keyOf(w.Key, b.confirmation)
		switch {
		case aNamed && a.confirmation != "" && !(bNamed && b.confirmation != ""):
			return -1
		case bNamed && b.confirmation != "" && !(aNamed && a.confirmation != ""):
			return 1
		}
		return 0
	})
	c := candidates[0]
	switch {
	case w.Arrived.Before(c.at):
		return nil, fmt.Sprintf("it reached Stripe before the %s was given", c)
	case c.needsApproval && (c.approvedAt.IsZero() || w.Arrived.Before(c.approvedAt)):
		return nil, fmt.Sprintf("the policy asks a person's approval of %s, not given by then", c)
	case c.kind == "token" && w.Arrived.After(c.at.Add(sweepConfirmTTL+sweepStripeTimeout)):
		return nil, fmt.Sprintf("it was sent more than CONFIRM_TTL after the second call of %s", c)
	case !sc.deniedAt.IsZero() && w.Arrived.After(sc.deniedAt) && !(sentAfterDecision[sc.step.String()] &&
		w.Arrived.Before(sc.deniedAt.Add(sweepStripeTimeout))):
		return nil, fmt.Sprintf("the policy denied every change before it was sent (%s)", c)
	}
	return c, ""
}

// change is what one write did: the subscription before and after it, and
// the state billingd could know when it sent it (seenBefore); restored is
// when a released scheduled change was last put back (a consent's release
// before then was undone, and may be made again by its next attempt).
type change struct {
	before, after, seen sweepState
	restored            time.Time
}

func (ch change) plan() bool     { return ch.before.plan != ch.after.plan }
func (ch change) seats() bool    { return ch.before.seats != ch.after.seats }
func (ch change) schedule() bool { return ch.before.scheduled != ch.after.scheduled }
func (ch change) ends() bool     { return ch.before.ends != ch.after.ends }

// fits reports whether a write is part of the change c agreed to: every
// part of the subscription it changed goes from the state shown (as
// billingd could know it) to the state agreed. A standing consent fits a
// change of plan to the plan its request asked for, and never touches a
// schedule.
func (c *sweepConsent) fits(ch change) bool {
	if c.standing() {
		return ch.plan() && ch.after.plan == c.to.plan && !ch.schedule() && !ch.seats() && !ch.ends()
	}
	if ch.ends() && (ch.seen.ends != c.from.ends || ch.after.ends != c.to.ends) {
		return false
	}
	if ch.plan() && (ch.seen.plan != c.from.plan || ch.after.plan != c.to.plan) {
		return false
	}
	if ch.seats() && (ch.seen.seats != c.from.seats || ch.after.seats != c.to.seats) {
		return false
	}
	if ch.schedule() && (ch.seen.scheduled != c.from.scheduled || ch.after.scheduled != c.to.scheduled) {
		return false
	}
	return true
}

// spent reports whether c has already explained a write that changed what
// this one changes (no consent produces two writes of one change), or, for
// a mandate's request, whether the mandate's changes are all spent.
func (c *sweepConsent) spent(ch change, mandate *sweepMandateGiven) bool {
	for _, w := range c.writes {
		b, a := stateAtStripe(w.Before), stateAtStripe(w.After)
		if (b.plan != a.plan && ch.plan()) || (b.seats != a.seats && ch.seats()) || (b.ends != a.ends && ch.ends()) ||
			(b.scheduled != a.scheduled && ch.schedule() && w.At.After(ch.restored)) {
			return true
		}
	}
	if c.kind == "mandate" && mandate != nil {
		made := 0
		for _, other := range mandate.requests {
			made += len(other.writes)
		}
		return made >= mandate.grant.MaxChanges
	}
	return false
}

// sweepMandateGiven is the mandate the test granted, with its bounds as
// the test granted them, and the requests the agent made under it.
type sweepMandateGiven struct {
	id       string
	grant    mandateGrant
	requests []*sweepConsent
}

// sweepAnswerClaims is what an answer says, read as a person reads it.
type sweepAnswerClaims struct {
	OK           bool   `json:"ok"`
	Noop         bool   `json:"noop"`
	Confirmation string `json:"confirmation_id"`
	Subscription *struct {
		Plan              string `json:"plan"`
		Quantity          int64  `json:"quantity"`
		Status            string `json:"status"`
		CancelAtPeriodEnd bool   `json:"cancel_at_period_end"`
		ScheduledChange   *struct {
			To       string    `json:"to"`
			At       time.Time `json:"at"`
			Quantity int64     `json:"quantity"`
		} `json:"scheduled_change"`
	} `json:"subscription"`
}

// claims reads an answer's body; ok is false for a body that is not JSON.
func (a sweepAnswer) claims() (c sweepAnswerClaims, ok bool) {
	return c, json.Unmarshal(a.body, &c) == nil
}

// executed reports whether the answer says the change was made.
func (a sweepAnswer) executed() bool {
	c, ok := a.claims()
	return ok && a.status == http.StatusOK && c.OK && !c.Noop && c.Subscription != nil
}

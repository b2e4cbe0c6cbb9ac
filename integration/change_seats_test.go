package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// change_seats (contract §15): the seats of the current plan, behind the
// same handshake as a plan change.

// proposeSeats is a first call of change_seats that must give a proposal.
func (h *harness) proposeSeats(token string, n int64, at string) proposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/seats", token, seatsBody(n, at, ""))
	wantStatus(h.t, r, http.StatusAccepted, "")
	var p proposal
	r.decode(h.t, &p)
	return p
}

func seatsBody(n int64, at, token string) map[string]any {
	body := map[string]any{"quantity": n}
	if at != "" {
		body["at"] = at
	}
	if token != "" {
		body["confirm_token"] = token
	}
	return body
}

// TestChangeSeatsUp: two seats to five. The first call changes nothing and
// says in words what is added, at what price per seat, what is due now
// and what recurs from when; the amount is three seats' proration (a
// one-seat upgrade's worth of days, three times). The second call charges
// exactly that on the update's own invoice, and Stripe and billingd have
// five seats on the same plan.
func TestChangeSeatsUp(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "moreseats", "pro", 2)
	p := h.proposeSeats(tok, 5, "")
	d := p.Details
	if p.Operation != string(billing.OpSeats) || d.From != "pro" || d.To != "pro" || d.QuantityFrom != 2 || d.QuantityTo != 5 ||
		d.Danger != billing.DangerCharges || d.AmountDueNowCents <= 0 {
		t.Fatalf("proposal: %+v", p)
	}
	for _, words := range []string{"Add 3 seats to", "from 2 seats to 5 seats at $19/mo per seat", "due now", "$95/mo for 5 seats recurs from"} {
		if !strings.Contains(p.Summary, words) {
			t.Fatalf("summary %q lacks %q", p.Summary, words)
		}
	}
	if got := h.seatsAtStripe(sub); got != 2 {
		t.Fatalf("the first call changed Stripe: %d seats", got)
	}
	// Three seats for the rest of the period: three times a seat's worth
	// (a cent of rounding each).
	perSeat := (1900 * time.Until(d.NextChargeAt).Seconds()) / d.NextChargeAt.Sub(d.NextChargeAt.AddDate(0, -1, 0)).Seconds()
	if diff := float64(d.AmountDueNowCents) - 3*perSeat; diff < -10 || diff > 10 {
		t.Fatalf("quoted %d for three seats, a seat's proration is about %.0f", d.AmountDueNowCents, perSeat)
	}

	r := h.do("POST", "/api/billing/seats", tok, seatsBody(5, "", p.ConfirmToken))
	wantStatus(t, r, http.StatusOK, "")
	var done billing.ChangeResult
	r.decode(t, &done)
	if done.Charged == nil || done.Charged.AmountDueNowCents == nil || *done.Charged.AmountDueNowCents != d.AmountDueNowCents {
		t.Fatalf("charged %+v, quoted %d", done.Charged, d.AmountDueNowCents)
	}
	if done.Subscription == nil || done.Subscription.Plan != "pro" || done.Subscription.Quantity != 5 || h.seatsAtStripe(sub) != 5 {
		t.Fatalf("after: billingd %+v, Stripe %d seats", done.Subscription, h.seatsAtStripe(sub))
	}
	if v := h.subscriptionView(tok); v.Quantity != 5 {
		t.Fatalf("GET /subscription: %+v", v)
	}
	// The audit names the operation.
	events := h.auditEvents("moreseats")
	if i := slices.IndexFunc(events, func(e billing.AuditEvent) bool { return e.Event == billing.EventOperationExecuted }); i < 0 ||
		events[i].Operation != string(billing.OpSeats) {
		t.Fatalf("audit: %+v", events)
	}
}

// TestChangeSeatsDown: five seats to two, now: nothing is charged, the
// unused time of three seats is credited on the next invoice (the summary
// says credited, and how much), and Stripe has two seats.
func TestChangeSeatsDown(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "fewerseats", "pro", 5)
	p := h.proposeSeats(tok, 2, "")
	d := p.Details
	if d.QuantityFrom != 5 || d.QuantityTo != 2 || d.Danger != billing.DangerCharges || d.AmountDueNowCents != 0 || d.CreditCents <= 0 {
		t.Fatalf("proposal: %+v", p)
	}
	for _, words := range []string{"Remove 3 seats from", "Nothing is charged now", "credit of", "$38/mo for 2 seats recurs from"} {
		if !strings.Contains(p.Summary, words) {
			t.Fatalf("summary %q lacks %q", p.Summary, words)
		}
	}
	if strings.Contains(strings.ToLower(p.Summary), "refund") {
		t.Fatalf("a credit is not a refund: %q", p.Summary)
	}
	r := h.do("POST", "/api/billing/seats", tok, seatsBody(2, "", p.ConfirmToken))
	wantStatus(t, r, http.StatusOK, "")
	if got := h.seatsAtStripe(sub); got != 2 {
		t.Fatalf("Stripe has %d seats, want 2", got)
	}
	if v := h.subscriptionView(tok); v.Quantity != 2 || v.Plan != "pro" {
		t.Fatalf("billingd: %+v", v)
	}
}

// TestChangeSeatsAtPeriodEnd: five seats to two at the period's end.
// Nothing changes or is charged now (reversible); Stripe holds a schedule
// whose current phase keeps five seats and whose next has two; billingd
// shows the scheduled change with its seats, and once Stripe's renewal
// makes it, two seats.
func TestChangeSeatsAtPeriodEnd(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "laterseats", "pro", 5)
	p := h.proposeSeats(tok, 2, "period_end")
	d := p.Details
	if d.Danger != billing.DangerReversible || d.At != "period_end" || d.QuantityTo != 2 || d.AmountDueNowCents != 0 || d.NextCharge == nil ||
		d.NextCharge.AmountDueCents != 3800 {
		t.Fatalf("proposal: %+v", p)
	}
	if !strings.Contains(p.Summary, "Nothing changes or is charged now") || !strings.Contains(p.Summary, "becomes 2 seats") {
		t.Fatalf("summary: %s", p.Summary)
	}
	r := h.do("POST", "/api/billing/seats", tok, seatsBody(2, "period_end", p.ConfirmToken))
	wantStatus(t, r, http.StatusOK, "")
	if got := h.seatsAtStripe(sub); got != 5 {
		t.Fatalf("Stripe has %d seats before the period's end, want 5", got)
	}
	stripeSub, _ := h.fake.Subscription(sub)
	sch, ok := h.fake.Schedule(stripeSub.Schedule)
	if !ok || len(sch.Phases) != sch.Current+2 || sch.Phases[sch.Current].Items[0].Quantity != 5 || sch.Phases[sch.Current+1].Items[0].Quantity != 2 {
		t.Fatalf("schedule at Stripe: %+v", sch)
	}
	v := h.subscriptionView(tok)
	if v.Quantity != 5 || v.ScheduledChange == nil || v.ScheduledChange.Quantity != 2 || v.ScheduledChange.To != "pro" {
		t.Fatalf("billingd before the renewal: %+v", v)
	}
	// Asking again for the same is nothing to do.
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(2, "period_end", "")), http.StatusOK, "")

	delivered := len(h.fake.Events())
	h.fake.AdvanceClock(time.Until(v.ScheduledChange.At) + time.Hour)
	for _, ev := range h.fake.Events()[delivered:] {
		wantStatus(t, h.deliver(ev), http.StatusOK, "")
	}
	if after := h.subscriptionView(tok); after.Quantity != 2 || after.ScheduledChange != nil || after.Plan != "pro" {
		t.Fatalf("after the renewal billingd shows %+v; want two seats of Pro", after)
	}
	events := h.auditEvents("laterseats")
	if !slices.ContainsFunc(events, func(e billing.AuditEvent) bool {
		return e.Event == billing.EventScheduledChangeApplied && e.ConfirmationID == p.ConfirmationID
	}) {
		t.Fatalf("audit %v: want SCHEDULED_CHANGE_APPLIED of %s", eventNames(events), p.ConfirmationID)
	}
}

// TestKeepSeatsCancelsScheduledSeats: while fewer seats are scheduled,
// asking for the seats the subscription has now is keeping them: the
// schedule is released, and Stripe keeps five seats at the renewal.
func TestKeepSeatsCancelsScheduledSeats(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "keepseats", "pro", 5)
	p := h.proposeSeats(tok, 2, "period_end")
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(2, "period_end", p.ConfirmToken)), http.StatusOK, "")
	keep := h.proposeSeats(tok, 5, "")
	if keep.Details.Danger != billing.DangerReversible || !strings.HasPrefix(keep.Summary, "Keep Pro: cancel the change to Pro with 2 seats") {
		t.Fatalf("keep: %q %+v", keep.Summary, keep.Details)
	}
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(5, "", keep.ConfirmToken)), http.StatusOK, "")
	if stripeSub, _ := h.fake.Subscription(sub); stripeSub.Schedule != "" || h.seatsAtStripe(sub) != 5 {
		t.Fatalf("after keeping: schedule %q, %d seats", stripeSub.Schedule, h.seatsAtStripe(sub))
	}
	if v := h.subscriptionView(tok); v.ScheduledChange != nil || v.Quantity != 5 {
		t.Fatalf("billingd after keeping: %+v", v)
	}
}

// TestMoreSeatsDeclined: a declined card changes nothing: 402, Stripe
// keeps two seats, billingd too.
func TestMoreSeatsDeclined(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "declinedseats", "pro", 2)
	p := h.proposeSeats(tok, 4, "")
	h.fake.FailNextForAt(sub, stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(4, "", p.ConfirmToken)), http.StatusPaymentRequired, "payment_failed")
	if got := h.seatsAtStripe(sub); got != 2 {
		t.Fatalf("Stripe has %d seats after a declined card, want 2", got)
	}
	if v := h.subscriptionView(tok); v.Quantity != 2 {
		t.Fatalf("billingd: %+v", v)
	}
}

// TestChangeSeatsRequests: what a call of change_seats may say, and what a
// second call must repeat.
func TestChangeSeatsRequests(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "seatrules", "pro", 3)
	for _, body := range []string{
		`{"quantity":0}`, `{"quantity":10001}`, `{"quantity":-1}`, `{"quantity":2.5}`, `{}`, `{"quantity":"4"}`,
		`{"quantity":4,"to":"scale"}`, `{"quantity":5,"at":"period_end"}`, `{"quantity":4,"at":"later"}`,
	} {
		wantStatus(t, h.offSpec().do("POST", "/api/billing/seats", tok, body), http.StatusBadRequest, "invalid_request")
	}
	wantStatus(t, h.offSpec().do("POST", "/api/billing/upgrade", tok, `{"to":"scale","quantity":4}`), http.StatusBadRequest, "invalid_request")
	// The same seats: nothing to do, no token.
	r := h.do("POST", "/api/billing/seats", tok, `{"quantity":3}`)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"noop":true`) {
		t.Fatalf("same seats: %s", r.Body)
	}
	// A second call for other seats than the first call's voids the token
	// and sends nothing.
	p := h.proposeSeats(tok, 4, "")
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(6, "", p.ConfirmToken)), http.StatusConflict, "consent_token_mismatch")
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, seatsBody(4, "", p.ConfirmToken)), http.StatusConflict, "consent_token_invalid")
	if got := h.seatsAtStripe(sub); got != 3 {
		t.Fatalf("Stripe has %d seats, want 3", got)
	}
	// A seats token is no plan change's.
	p = h.proposeSeats(tok, 4, "")
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, map[string]string{"to": "pro", "confirm_token": p.ConfirmToken}),
		http.StatusConflict, "consent_token_mismatch")
	// A standing mandate covers seats only within a max_quantity.
	grant := fmt.Sprintf(`{"client":"claude-desktop","operations":["change_seats"],"to_plans":["pro"],"max_amount_due_cents":100000,`+
		`"budget_cents":100000,"max_changes":3,"expires_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	wantStatus(t, h.offSpec().do("POST", "/api/billing/mandates", h.personAt("seatrules", "person-of-seatrules", time.Now(), false), json.RawMessage(grant)),
		http.StatusBadRequest, "invalid_request")
}

// TestChangeSeatsOverMCP: an agent over MCP (Go SDK client) changes the
// seats with the two calls; the first call's text is the summary alone.
func TestChangeSeatsOverMCP(t *testing.T) {
	t.Parallel()
	h, sub, _ := seatsOrg(t, "mcpseats", "pro", 2)
	cs := mcpConnect(t, h.url, h.mcpUser("mcpseats", "mia"), "")
	first := callTool(t, cs, "change_seats", map[string]any{"quantity": 3})
	var p proposal
	structured(t, first, &p)
	if first.IsError || p.ConfirmToken == "" || p.Details.QuantityTo != 3 || !strings.HasPrefix(p.Summary, "Add 1 seat to") {
		t.Fatalf("first call: %+v", p)
	}
	second := callTool(t, cs, "change_seats", map[string]any{"quantity": 3, "confirm_token": p.ConfirmToken})
	if second.IsError || h.seatsAtStripe(sub) != 3 {
		t.Fatalf("second call: error %v, Stripe %d seats", second.IsError, h.seatsAtStripe(sub))
	}
	var view struct {
		Quantity int64 `json:"quantity"`
	}
	structured(t, callTool(t, cs, "get_subscription", nil), &view)
	if view.Quantity != 3 {
		t.Fatalf("get_subscription: %+v", view)
	}
}

// TestMandateCoversSeats: a person grants an agent seats up to a
// max_quantity (contract §13, §15). A first call within it executes at
// once under the mandate (its result names it); one beyond it, and one
// at the period's end, are the usual proposal; a mandate without
// max_quantity, or with it but without change_seats, is refused.
func TestMandateCoversSeats(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "seatmandate", "pro", 2)
	g := generous()
	g.Operations, g.ToPlans = []string{"change_seats"}, []string{"pro"}
	person := h.personAt("seatmandate", "person-of-seatmandate", time.Now(), false)
	wantStatus(t, h.do("POST", "/api/billing/mandates", person, g), http.StatusBadRequest, "invalid_request") // no max_quantity
	upgrades := generous()
	upgrades.MaxQuantity = 5
	wantStatus(t, h.do("POST", "/api/billing/mandates", person, upgrades), http.StatusBadRequest, "invalid_request") // no change_seats
	g.MaxQuantity = 5
	m := h.grantMandate("seatmandate", "person-of-seatmandate", g)
	if m.MaxQuantity != 5 || !strings.Contains(m.Words(), "change the seats (up to 5)") {
		t.Fatalf("mandate: %+v (%s)", m, m.Words())
	}
	r := h.do("POST", "/api/billing/seats", tok, seatsBody(4, "", ""))
	wantStatus(t, r, http.StatusOK, "")
	var done billing.ChangeResult
	r.decode(t, &done)
	if done.MandateID != m.ID || h.seatsAtStripe(sub) != 4 {
		t.Fatalf("within max_quantity: %s; Stripe %d seats", r.Body, h.seatsAtStripe(sub))
	}
	h.proposeSeats(tok, 6, "") // beyond it: a proposal, nothing made
	h.proposeSeats(tok, 3, "period_end")
	if got := h.seatsAtStripe(sub); got != 4 {
		t.Fatalf("Stripe has %d seats, want 4", got)
	}
}

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// cancel_subscription (contract §15): at the period's end or now, behind
// the same handshake as every change.

// proposeCancel is a first call of cancel_subscription that must give a
// proposal.
func (h *harness) proposeCancel(token string, body map[string]string) proposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/cancel", token, body)
	wantStatus(h.t, r, http.StatusAccepted, "")
	var p proposal
	r.decode(h.t, &p)
	return p
}

// with is body with the second call's token.
func with(body map[string]string, token string) map[string]string {
	out := map[string]string{"confirm_token": token}
	for k, v := range body {
		out[k] = v
	}
	return out
}

// TestCancelAtPeriodEnd: the subscription stays active until the period's
// end, nothing moves now, Stripe has cancel_at_period_end with the
// customer's reason, billingd shows it; at the renewal Stripe ends the
// subscription, and billingd refuses every change after (409
// subscription_inactive).
func TestCancelAtPeriodEnd(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "leaving", "pro", 2)
	body := map[string]string{"at": "period_end", "reason": "too_expensive", "comment": "we are a small team"}
	p := h.proposeCancel(tok, body)
	d := p.Details
	if p.Operation != string(billing.OpCancel) || d.Danger != billing.DangerReversible || d.Cancellation != billing.CancelAtPeriodEnd ||
		d.CancelAt == nil || !d.CancelAt.Equal(d.NextChargeAt) || d.AmountDueNowCents != 0 || d.CreditCents != 0 ||
		d.CancelReason != "too_expensive" {
		t.Fatalf("proposal: %+v", p)
	}
	for _, words := range []string{"Cancel leaving's Pro subscription, 2 seats at the end of the current period", "stays active until",
		"Nothing is charged or refunded", "can be resumed"} {
		if !strings.Contains(p.Summary, words) {
			t.Fatalf("summary %q lacks %q", p.Summary, words)
		}
	}
	if s, _ := h.fake.Subscription(sub); s.CancelAtPeriodEnd {
		t.Fatal("the first call cancelled at Stripe")
	}
	// The second call must repeat the reason and the comment.
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, with(map[string]string{"at": "period_end"}, p.ConfirmToken)),
		http.StatusConflict, "consent_token_mismatch")
	p = h.proposeCancel(tok, body)
	r := h.do("POST", "/api/billing/cancel", tok, with(body, p.ConfirmToken))
	wantStatus(t, r, http.StatusOK, "")
	s, _ := h.fake.Subscription(sub)
	if !s.CancelAtPeriodEnd || s.Status != "active" || s.CancellationDetails.Feedback != "too_expensive" ||
		s.CancellationDetails.Comment != "we are a small team" {
		t.Fatalf("Stripe: %+v", s)
	}
	v := h.subscriptionView(tok)
	if !v.CancelAtPeriodEnd || v.Status != "active" {
		t.Fatalf("billingd: %+v", v)
	}
	// Asking again: nothing to do.
	r = h.do("POST", "/api/billing/cancel", tok, body)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"noop":true`) {
		t.Fatalf("again: %s", r.Body)
	}
	// A change at the period's end would never come: refused.
	wantStatus(t, h.do("POST", "/api/billing/downgrade", tok, map[string]string{"to": "free", "at": "period_end"}),
		http.StatusUnprocessableEntity, "invalid_plan_change")

	delivered := len(h.fake.Events())
	h.fake.AdvanceClock(time.Until(v.CurrentPeriodEnd) + time.Hour)
	for _, ev := range h.fake.Events()[delivered:] {
		wantStatus(t, h.deliver(ev), http.StatusOK, "")
	}
	if after := h.subscriptionView(tok); after.Status != "canceled" || after.CanceledAt == nil {
		t.Fatalf("after the period's end billingd shows %+v", after)
	}
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, map[string]string{"to": "scale"}), http.StatusConflict, "subscription_inactive")
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, map[string]int{"quantity": 3}), http.StatusConflict, "subscription_inactive")
	// Also a request at the period's end, whose date has passed: the
	// subscription is over, not renewing.
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, body), http.StatusConflict, "subscription_inactive")
}

// TestCancelNow: access ends now and cannot be undone (irreversible); the
// unused time is credited to the balance, which the summary says without
// ever saying refunded; Stripe's final invoice credits exactly that; the
// receipt states it; every operation after answers 409
// subscription_inactive.
func TestCancelNow(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "gone", "pro", 3)
	body := map[string]string{"at": "now"}
	p := h.proposeCancel(tok, body)
	d := p.Details
	if d.Danger != billing.DangerIrreversible || d.Cancellation != billing.CancelNow || d.CreditCents <= 0 || d.AmountDueNowCents != 0 {
		t.Fatalf("proposal: %+v", p)
	}
	for _, words := range []string{"now: access ends immediately", "cannot be undone", "is credited to the account's balance"} {
		if !strings.Contains(p.Summary, words) {
			t.Fatalf("summary %q lacks %q", p.Summary, words)
		}
	}
	if strings.Contains(strings.ToLower(p.Summary), "refund") {
		t.Fatalf("a credit is not a refund: %q", p.Summary)
	}
	r := h.do("POST", "/api/billing/cancel", tok, with(body, p.ConfirmToken))
	wantStatus(t, r, http.StatusOK, "")
	s, _ := h.fake.Subscription(sub)
	if s.Status != "canceled" {
		t.Fatalf("Stripe: %+v", s)
	}
	var credited int64
	for _, w := range h.fake.WritesFor(sub) {
		credited += w.Credited
	}
	if credited != d.CreditCents {
		t.Fatalf("Stripe credited %d, the summary said %d", credited, d.CreditCents)
	}
	v := h.subscriptionView(tok)
	if v.Status != "canceled" || v.CanceledAt == nil {
		t.Fatalf("billingd: %+v", v)
	}
	claims := h.receiptClaims(tok, p.ConfirmationID)
	if claims.CreditCents != d.CreditCents || claims.CreditedCents != credited || claims.Operation != billing.OpCancel ||
		claims.Cancellation != billing.CancelNow || claims.InvoiceID == "" {
		t.Fatalf("receipt: %+v", claims)
	}
	for _, call := range []struct{ path, body string }{
		{"/api/billing/cancel", `{"at":"now"}`}, {"/api/billing/cancel", `{"at":"period_end"}`},
		{"/api/billing/downgrade", `{"to":"free"}`}, {"/api/billing/seats", `{"quantity":1}`},
	} {
		wantStatus(t, h.do("POST", call.path, tok, call.body), http.StatusConflict, "subscription_inactive")
	}
}

// TestCancelNowAnswerLost: the cancellation's answer is lost. Stripe
// ignores the idempotency key of a DELETE and answers the retry 404; that
// is no "nothing was done": billingd reads the subscription back, finds it
// cancelled and records the cancellation, once.
func TestCancelNowAnswerLost(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "lostcancel", "pro", 1)
	body := map[string]string{"at": "now"}
	p := h.proposeCancel(tok, body)
	h.fake.FailNextForAt(sub, stripepaytest.CancelSubscription, stripepaytest.LoseResponse)
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, with(body, p.ConfirmToken)), http.StatusServiceUnavailable, "upstream_unavailable")
	var r response
	for try := 0; try < 20; try++ {
		if r = h.do("POST", "/api/billing/cancel", tok, with(body, p.ConfirmToken)); r.Status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantStatus(t, r, http.StatusOK, "")
	if v := h.subscriptionView(tok); v.Status != "canceled" {
		t.Fatalf("billingd: %+v", v)
	}
	if s, _ := h.fake.Subscription(sub); s.Status != "canceled" {
		t.Fatalf("Stripe: %+v", s)
	}
	wantEvents(t, h.auditEvents("lostcancel"), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:outcome_unknown", "OPERATION_EXECUTED")
}

// TestCancelReplacesScheduledDowngrade: Stripe refuses a pending
// cancellation on a subscription a schedule manages; billingd's
// cancellation at the period's end says it replaces the scheduled
// downgrade, releases the schedule, then cancels.
func TestCancelReplacesScheduledDowngrade(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "replaced", "scale", 1)
	down := h.proposeAt(tok, "downgrade", "pro", "period_end")
	h.confirmAt(tok, "downgrade", "pro", "period_end", down.ConfirmToken)
	body := map[string]string{"at": "period_end"}
	p := h.proposeCancel(tok, body)
	if p.Details.CancelsScheduledChange == nil || !strings.Contains(p.Summary, "This cancels the change to Pro scheduled for") {
		t.Fatalf("proposal: %q %+v", p.Summary, p.Details)
	}
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, with(body, p.ConfirmToken)), http.StatusOK, "")
	s, _ := h.fake.Subscription(sub)
	if !s.CancelAtPeriodEnd || s.Schedule != "" {
		t.Fatalf("Stripe: cancel_at_period_end %v, schedule %q", s.CancelAtPeriodEnd, s.Schedule)
	}
	if v := h.subscriptionView(tok); !v.CancelAtPeriodEnd || v.ScheduledChange != nil || v.Plan != "scale" {
		t.Fatalf("billingd: %+v", v)
	}
}

// TestCancelRequests: what a call of cancel_subscription may say.
func TestCancelRequests(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "cancelrules", "pro", 1)
	for _, body := range []string{
		`{}`, `{"at":"later"}`, `{"at":""}`, `{"at":"now","reason":"bored"}`, `{"at":"now","to":"free"}`,
		`{"at":"now","quantity":2}`, fmt.Sprintf(`{"at":"now","comment":%q}`, strings.Repeat("x", 501)),
		`{"at":"now","comment":"a\u202eb"}`,
	} {
		wantStatus(t, h.offSpec().do("POST", "/api/billing/cancel", tok, body), http.StatusBadRequest, "invalid_request")
	}
	// A second call for the other "at" voids the token; nothing is sent.
	p := h.proposeCancel(tok, map[string]string{"at": "period_end"})
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, with(map[string]string{"at": "now"}, p.ConfirmToken)),
		http.StatusConflict, "consent_token_mismatch")
	if s, _ := h.fake.Subscription(sub); s.Status != "active" || s.CancelAtPeriodEnd {
		t.Fatalf("Stripe: %+v", s)
	}
	// A standing mandate never covers a cancellation.
	grant := fmt.Sprintf(`{"client":"claude-desktop","operations":["cancel_subscription"],"to_plans":["pro"],"max_amount_due_cents":0,`+
		`"budget_cents":0,"max_changes":1,"expires_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	wantStatus(t, h.offSpec().do("POST", "/api/billing/mandates", h.personAt("cancelrules", "person-of-cancelrules", time.Now(), false),
		json.RawMessage(grant)), http.StatusBadRequest, "invalid_request")
	// allow never lets what cannot be undone run at once: cancelling now
	// still asks (a proposal, Stripe untouched), while a cancellation at
	// the period's end, with its reason, runs under it. A rule's to_plans
	// names plans moved to: it never matches a cancellation.
	h.setPolicy("cancelrules", `{"rules":[{"name":"agents go free","action":"allow"}]}`)
	h.proposeCancel(tok, map[string]string{"at": "now"})
	if s, _ := h.fake.Subscription(sub); s.Status != "active" {
		t.Fatalf("allow cancelled now: %+v", s)
	}
	h.setPolicy("cancelrules", `{"rules":[{"name":"Pro is fine","to_plans":["pro"],"action":"allow"}]}`)
	h.proposeCancel(tok, map[string]string{"at": "period_end"})
	h.setPolicy("cancelrules", `{"rules":[{"name":"reversible runs at once","danger":["reversible"],"action":"allow"}]}`)
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, map[string]string{"at": "period_end", "reason": "unused"}), http.StatusOK, "")
	if s, _ := h.fake.Subscription(sub); !s.CancelAtPeriodEnd || s.CancellationDetails.Feedback != "unused" {
		t.Fatalf("allow at the period's end: %+v", s)
	}
	wantStatus(t, h.offSpec().do("POST", "/api/billing/seats", tok, `{"quantity":2,"reason":"unused"}`), http.StatusBadRequest, "invalid_request")
	// A policy can deny what cannot be undone, by its danger.
	h.setPolicy("cancelrules", `{"rules":[{"name":"nothing irreversible","danger":["irreversible"],"action":"deny"}]}`)
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, map[string]string{"at": "now"}), http.StatusForbidden, "operation_denied")
	r := h.do("POST", "/api/billing/resume", tok, map[string]string{}) // reversible: not denied
	wantStatus(t, r, http.StatusAccepted, "")
}

// TestWebhooksKeepSeatsAndCancellation: Stripe's dashboard adds seats,
// cancels at the period's end, resumes, and finally cancels now; its
// events (customer.subscription.updated and .deleted) arrive late, twice
// and newest first. billingd reads Stripe on each, so it ends where Stripe
// is: four seats, cancelled, and refuses every change.
func TestWebhooksKeepSeatsAndCancellation(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "hooked", "pro", 1)
	delivered := len(h.fake.Events())
	h.changeInDashboard(sub, func(s *stripepaytest.Subscription) { s.Items[0].Quantity = 4 })
	h.changeInDashboard(sub, func(s *stripepaytest.Subscription) { s.CancelAtPeriodEnd = true })
	h.changeInDashboard(sub, func(s *stripepaytest.Subscription) { s.CancelAtPeriodEnd = false })
	events := h.fake.Events()[delivered:]
	for i := len(events) - 1; i >= 0; i-- { // newest first, then again
		wantStatus(t, h.deliver(events[i]), http.StatusOK, "")
	}
	for _, ev := range events {
		wantStatus(t, h.deliver(ev), http.StatusOK, "")
	}
	if v := h.subscriptionView(tok); v.Quantity != 4 || v.CancelAtPeriodEnd || v.Status != "active" {
		t.Fatalf("billingd after the dashboard's changes: %+v", v)
	}
	delivered = len(h.fake.Events())
	h.changeInDashboard(sub, func(s *stripepaytest.Subscription) { s.Status = "canceled" })
	for _, ev := range append(h.fake.Events()[delivered:], h.fake.Events()[delivered:]...) {
		wantStatus(t, h.deliver(ev), http.StatusOK, "")
	}
	if v := h.subscriptionView(tok); v.Status != "canceled" || v.CanceledAt == nil || v.Quantity != 4 {
		t.Fatalf("billingd after the dashboard cancelled: %+v", v)
	}
	wantStatus(t, h.do("POST", "/api/billing/resume", tok, map[string]string{}), http.StatusConflict, "subscription_inactive")
}

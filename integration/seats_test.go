package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// withSeats gives org's subscription n seats in Stripe's dashboard and
// delivers Stripe's event, so that billingd's copy counts them too.
func (h *harness) withSeats(subscriptionID string, n int64) {
	h.t.Helper()
	h.changeInDashboard(subscriptionID, func(s *stripepaytest.Subscription) { s.Items[0].Quantity = n })
	events := h.fake.Events()
	wantStatus(h.t, h.deliver(events[len(events)-1]), http.StatusOK, "")
}

// seatsOrg is a harness with an org on plan whose subscription has n seats
// (billingd told by Stripe's event), and a person's token of the org.
func seatsOrg(t *testing.T, org, plan string, n int64) (h *harness, subscriptionID, token string) {
	t.Helper()
	h = newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	subscriptionID = h.createOrg(org, org, plan).Subscription.StripeSubscriptionID
	h.withSeats(subscriptionID, n)
	return h, subscriptionID, h.user(org, "person-of-"+org)
}

// seatsAtStripe is the quantity of the subscription's item at the fake.
func (h *harness) seatsAtStripe(subscriptionID string) int64 {
	h.t.Helper()
	sub, ok := h.fake.Subscription(subscriptionID)
	if !ok || len(sub.Items) != 1 {
		h.t.Fatalf("subscription %s at the fake: %+v", subscriptionID, sub)
	}
	return sub.Items[0].Quantity
}

// TestPlanChangeKeepsSeats: an org with five seats upgrades. The summary
// states the seats and the price per seat, the amount counts all five,
// Stripe invoices exactly that and keeps five seats on the new price, and
// billingd shows them (before: the second call found five seats where its
// quote assumed one and revoked the token as drift, so no multi-seat
// subscription could change plan; had it sent the change, Stripe would
// have reset the subscription to one seat).
func TestPlanChangeKeepsSeats(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "seats", "pro", 5)
	if r := h.do("GET", "/api/billing/subscription", tok, nil); !strings.Contains(string(r.Body), `"quantity":5`) {
		t.Fatalf("billingd's subscription after Stripe's event: %s", r.Body)
	}

	h.createOrg("oneseat", "One seat", "pro")
	single := h.propose(h.user("oneseat", "olga"), "upgrade", "scale")
	p := h.propose(tok, "upgrade", "scale")
	if !strings.Contains(p.Summary, "5 seats") || !strings.Contains(p.Summary, "($49/mo per seat)") {
		t.Fatalf("summary: %s", p.Summary)
	}
	// Prorated over the same days, five seats cost five times one (give or
	// take a cent of rounding per seat).
	if d := p.Details.AmountDueNowCents - 5*single.Details.AmountDueNowCents; d < -5 || d > 5 {
		t.Fatalf("five seats quoted %d, one seat %d", p.Details.AmountDueNowCents, single.Details.AmountDueNowCents)
	}

	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	var done struct {
		Charged struct {
			AmountDueNowCents *int64 `json:"amount_due_now_cents"`
		} `json:"charged"`
		Subscription struct {
			Plan     string `json:"plan"`
			Quantity int64  `json:"quantity"`
		} `json:"subscription"`
	}
	r.decode(t, &done)
	if done.Charged.AmountDueNowCents == nil || *done.Charged.AmountDueNowCents != p.Details.AmountDueNowCents {
		t.Fatalf("charged %v, quoted %d: %s", done.Charged.AmountDueNowCents, p.Details.AmountDueNowCents, r.Body)
	}
	if done.Subscription.Plan != "scale" || done.Subscription.Quantity != 5 {
		t.Fatalf("answer: %s", r.Body)
	}
	if got := h.seatsAtStripe(sub); got != 5 {
		t.Fatalf("Stripe has %d seats after the upgrade, want 5", got)
	}
}

// TestScheduledDowngradeKeepsSeats: a downgrade at the period's end of a
// five-seat subscription schedules five seats on the cheaper price, and
// billingd shows the scheduled change (before: the schedule's next phase
// had one seat, which billingd reads as a schedule it may not show).
func TestScheduledDowngradeKeepsSeats(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "seatsdown", "scale", 5)
	r := h.do("POST", "/api/billing/downgrade", tok, `{"to":"pro","at":"period_end"}`)
	wantStatus(t, r, http.StatusAccepted, "")
	var p proposal
	r.decode(t, &p)
	if !strings.Contains(p.Summary, "5 seats") {
		t.Fatalf("summary: %s", p.Summary)
	}
	wantStatus(t, h.do("POST", "/api/billing/downgrade", tok,
		`{"to":"pro","at":"period_end","confirm_token":"`+p.ConfirmToken+`"}`), http.StatusOK, "")
	stripeSub, _ := h.fake.Subscription(sub)
	sch, ok := h.fake.Schedule(stripeSub.Schedule)
	if !ok || sch.Current+1 >= len(sch.Phases) {
		t.Fatalf("no schedule at Stripe: %+v", sch)
	}
	for i, ph := range sch.Phases {
		if len(ph.Items) != 1 || ph.Items[0].Quantity != 5 {
			t.Fatalf("phase %d: %+v, want one item of 5 seats", i, ph.Items)
		}
	}
	view := h.do("GET", "/api/billing/subscription", tok, nil)
	if !strings.Contains(string(view.Body), `"scheduled_change":{"to":"pro"`) || !strings.Contains(string(view.Body), `"quantity":5`) {
		t.Fatalf("billingd's subscription: %s", view.Body)
	}
}

// TestSeatsChangedAtStripeBetweenCalls: seats added in Stripe's dashboard
// after the first call, with no webhook, void the token at the second call:
// the summary's amounts counted the old seats. Nothing is sent, and
// billingd records Stripe's seats.
func TestSeatsChangedAtStripeBetweenCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("seatsdrift")
	sub := acct.Subscription.StripeSubscriptionID
	h.changeInDashboard(sub, func(s *stripepaytest.Subscription) { s.Items[0].Quantity = 3 })
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	if plan := h.subscription(tok); plan != "pro" {
		t.Fatalf("billingd shows %s", plan)
	}
	if r := h.do("GET", "/api/billing/subscription", tok, nil); !strings.Contains(string(r.Body), `"quantity":3`) {
		t.Fatalf("billingd's subscription after the drift: %s", r.Body)
	}
	h.wantStripeChanges(acct, 0) // nothing sent: the dashboard is no request
}

package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestDeclinedUpgradePutsBackScheduleWithSeats: a declined upgrade on a
// five-seat subscription that had a downgrade scheduled puts the schedule
// back with five seats in both phases (before, found by review: the phases
// were sent with one seat, and with proration none Stripe applied the
// current phase at once: the customer was left with one seat).
func TestDeclinedUpgradePutsBackScheduleWithSeats(t *testing.T) {
	t.Parallel()
	h, subID, tok := seatsOrg(t, "putback", "pro", 5)
	p := h.proposeAt(tok, "downgrade", "free", "period_end")
	h.confirmAt(tok, "downgrade", "free", "period_end", p.ConfirmToken)
	up := h.propose(tok, "upgrade", "scale")
	h.fake.FailNextAt(stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
	r := h.confirm(tok, "upgrade", "scale", up.ConfirmToken)
	wantStatus(t, r, http.StatusPaymentRequired, "payment_failed")
	sub, _ := h.fake.Subscription(subID)
	sch, ok := h.fake.Schedule(sub.Schedule)
	if !ok || len(sch.Phases) < 2 || !strings.HasPrefix(h.scheduledAtStripe(sub), "free at ") {
		t.Fatalf("the downgrade to free is not scheduled again at Stripe: %+v", sch)
	}
	if got := h.seatsAtStripe(subID); got != 5 {
		t.Errorf("Stripe has %d seats after a declined upgrade, want 5", got)
	}
	for i, ph := range sch.Phases {
		if ph.Items[0].Quantity != 5 {
			t.Errorf("phase %d has %d seats, want 5", i, ph.Items[0].Quantity)
		}
	}
	v := h.do("GET", "/api/billing/subscription", tok, nil)
	if !strings.Contains(string(v.Body), `"quantity":5`) {
		t.Errorf("billingd shows %s", v.Body)
	}
}

// TestPolicyDangerDeny: a deny rule on "charges" refuses at the first call
// (after the quote), and, set between the calls, at the second call; under
// an allow rule a change whose danger is denied never runs.
func TestPolicyDangerDeny(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("dngdeny", "Danger deny", "scale")
	tok := h.user("dngdeny", "dd")
	p := h.propose(tok, "downgrade", "pro")
	h.setPolicy("dngdeny", `{"rules":[{"name":"no money","danger":["charges"],"action":"deny"}]}`)
	wantStatus(t, h.confirm(tok, "downgrade", "pro", p.ConfirmToken), http.StatusForbidden, "operation_denied")
	wantStatus(t, h.do("POST", "/api/billing/downgrade", tok, `{"to":"pro"}`), http.StatusForbidden, "operation_denied")
	h.setPolicy("dngdeny", `{"rules":[{"name":"downgrades at once","operation":"downgrade_plan","action":"allow"},
		{"name":"no money","danger":["charges"],"action":"deny"}]}`)
	wantStatus(t, h.do("POST", "/api/billing/downgrade", tok, `{"to":"pro"}`), http.StatusForbidden, "operation_denied")
	h.wantStripeChanges(acct, 0)
}

// TestKeepOverScheduleOlderThanSeats: a schedule billingd made on one seat,
// then seats added in the dashboard while the phases stay at one (the
// renewal would take the subscription back to one seat). Keeping the plan
// releases the schedule: the five seats stay, and no phase is left to drop
// them (the second review: refusing such a schedule as opaque only made
// every change over it fail after the person had consented).
func TestKeepOverScheduleOlderThanSeats(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("oldsched", "Old schedule", "scale")
	subID := acct.Subscription.StripeSubscriptionID
	tok := h.user("oldsched", "ro")
	p := h.proposeAt(tok, "downgrade", "pro", "period_end")
	h.confirmAt(tok, "downgrade", "pro", "period_end", p.ConfirmToken)
	h.withSeats(subID, 5)
	keep := h.propose(tok, "upgrade", "scale")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", keep.ConfirmToken), http.StatusOK, "")
	sub, _ := h.fake.Subscription(subID)
	if got := h.seatsAtStripe(subID); got != 5 || h.scheduledAtStripe(sub) != "none" {
		t.Fatalf("after the keep Stripe has %d seats, scheduled: %s", got, h.scheduledAtStripe(sub))
	}
}

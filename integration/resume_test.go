package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
)

// TestResume: a cancellation at the period's end is undone by a
// handshake of its own: the first call says the subscription renews again
// and nothing is charged now (reversible); the second makes Stripe renew
// it again. Resuming what is not cancelled is nothing to do.
func TestResume(t *testing.T) {
	t.Parallel()
	h, sub, tok := seatsOrg(t, "stays", "pro", 2)
	if r := h.do("POST", "/api/billing/resume", tok, map[string]string{}); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"noop":true`) {
		t.Fatalf("resuming what is not ending: %d %s", r.Status, r.Body) // nothing pending: a noop, no token
	}
	cancel := h.proposeCancel(tok, map[string]string{"at": "period_end"})
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, with(map[string]string{"at": "period_end"}, cancel.ConfirmToken)), http.StatusOK, "")

	r := h.do("POST", "/api/billing/resume", tok, map[string]string{})
	wantStatus(t, r, http.StatusAccepted, "")
	var p proposal
	r.decode(t, &p)
	d := p.Details
	if p.Operation != string(billing.OpResume) || d.Danger != billing.DangerReversible || d.Cancellation != billing.Resume ||
		d.AmountDueNowCents != 0 || !strings.HasPrefix(p.Summary, "Resume stays's Pro subscription, 2 seats: instead of ending on") ||
		!strings.Contains(p.Summary, "it renews then at $38/mo (2 seats). Nothing is charged now.") {
		t.Fatalf("proposal: %q %+v", p.Summary, d)
	}
	if s, _ := h.fake.Subscription(sub); !s.CancelAtPeriodEnd {
		t.Fatal("the first call resumed at Stripe")
	}
	wantStatus(t, h.do("POST", "/api/billing/resume", tok, map[string]string{"confirm_token": p.ConfirmToken}), http.StatusOK, "")
	if s, _ := h.fake.Subscription(sub); s.CancelAtPeriodEnd || s.Status != "active" {
		t.Fatalf("Stripe: %+v", s)
	}
	if v := h.subscriptionView(tok); v.CancelAtPeriodEnd {
		t.Fatalf("billingd: %+v", v)
	}
	wantStatus(t, h.offSpec().do("POST", "/api/billing/resume", tok, `{"at":"now"}`), http.StatusBadRequest, "invalid_request")
}

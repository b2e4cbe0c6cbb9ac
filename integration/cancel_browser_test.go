package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardCancelInBrowser: a person cancels in the dashboard, in
// Chromium: at the period's end (the page then says when it ends), then
// now (the dialog says it cannot be undone and what is credited; the page
// then says access has ended and offers no more changes).
func TestDashboardCancelInBrowser(t *testing.T) {
	t.Parallel()
	h, sub, _ := seatsOrg(t, "webcancel", "pro", 2)
	admin := h.admin("webcancel", "wendy")
	b := newBrowser(t)
	shots := dashboardShots(t)
	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(admin)
	b.waitText("sub-seats", "2")

	b.confirmInDialog("cancel-period-end", "Cancel the subscription at the end of the period?")
	b.waitTextContains("status", "Cancelled at the end of the period: the subscription ends on")
	b.waitTextContains("ending-text", "unless resumed")
	// The page goes on to show the change's receipt, which moves the
	// layout: wait for it before clicking anything else.
	b.waitTextContains("receipt-claims", "cancel_subscription")
	if s, _ := h.fake.Subscription(sub); !s.CancelAtPeriodEnd {
		t.Fatal("Stripe has no pending cancellation")
	}

	// Resume, then cancel at the period's end again.
	b.confirmInDialog("resume", "Resume the subscription?")
	b.waitTextContains("status", "Resumed: the subscription renews on")
	b.waitTextContains("receipt-claims", "renews again")
	if s, _ := h.fake.Subscription(sub); s.CancelAtPeriodEnd {
		t.Fatal("Stripe still cancels at the period's end")
	}
	b.do(chromedp.Click(chromedp.ID("cancel-period-end")))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitTextContains("ending-text", "unless resumed")
	b.waitTextContains("receipt-claims", "ends on")

	b.do(chromedp.Click(chromedp.ID("cancel-now")))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	if title := b.text("confirm-title"); title != "Cancel the subscription now?" {
		t.Errorf("title %q", title)
	}
	if facts := b.text("confirm-facts"); !strings.Contains(facts, "cannot be undone") || !strings.Contains(facts, "Credited to the balance") {
		t.Errorf("facts %q", facts)
	}
	b.screenshot(filepath.Join(shots, "dashboard-cancel-now.png"))
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("status", "Cancelled: access has ended.")
	b.waitTextContains("ending-text", "access has ended")
	if s, _ := h.fake.Subscription(sub); s.Status != "canceled" {
		t.Fatalf("Stripe: %+v", s)
	}
	if hidden := b.eval(`String(document.getElementById("cancel-actions").hidden && document.getElementById("seats-form").hidden)`); hidden != "true" {
		t.Errorf("the page still offers changes of a cancelled subscription")
	}
	b.wantNoScriptErrors()
}

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardSeatsInBrowser: a person changes the seats in the dashboard,
// in Chromium. The dialog shows the summary verbatim and the seats from →
// to; Confirm makes it at Stripe. Fewer seats at the period's end are
// shown as scheduled, and Keep cancels them.
func TestDashboardSeatsInBrowser(t *testing.T) {
	t.Parallel()
	h, sub, _ := seatsOrg(t, "webseats", "pro", 2)
	admin := h.admin("webseats", "wendy")
	b := newBrowser(t)
	shots := dashboardShots(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(admin)
	b.waitText("sub-seats", "2")

	// Two seats more, now.
	b.do(chromedp.SetValue(chromedp.ID("seats-quantity"), "4"), chromedp.Click(chromedp.ID("change-seats")))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	if title := b.text("confirm-title"); title != "Confirm the change of seats" {
		t.Errorf("title %q", title)
	}
	summary := b.text("confirm-summary")
	if !strings.HasPrefix(summary, "Add 2 seats to webseats's Pro plan: from 2 seats to 4 seats") {
		t.Errorf("summary %q", summary)
	}
	if facts := b.text("confirm-facts"); !strings.Contains(facts, "2 → 4") {
		t.Errorf("facts %q", facts)
	}
	b.screenshot(filepath.Join(shots, "dashboard-seats-dialog.png"))
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("status", "Done: Pro now has 4 seats.")
	b.waitText("sub-seats", "4")
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	b.waitTextContains("receipt", "change_seats: pro, 2 → 4 seats") // the signed receipt names the seats
	if got := h.seatsAtStripe(sub); got != 4 {
		t.Fatalf("Stripe has %d seats after Confirm, want 4", got)
	}

	// Fewer at the period's end: scheduled, nothing changed now.
	b.do(chromedp.SetValue(chromedp.ID("seats-quantity"), "3"), chromedp.SetValue(chromedp.ID("seats-when"), "period_end"),
		chromedp.Click(chromedp.ID("change-seats")))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	if facts := b.text("confirm-facts"); !strings.Contains(facts, "4 → 3") || !strings.Contains(facts, "Changes on") {
		t.Errorf("facts %q", facts)
	}
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitTextContains("status", "Scheduled: the seats change to 3 on")
	b.waitTextContains("scheduled-text", "Changes to Pro with 3 seats on")
	b.waitTextContains("receipt-claims", "4 → 3 seats") // the receipt moves the layout: wait for it before clicking
	if got := h.seatsAtStripe(sub); got != 4 {
		t.Fatalf("Stripe has %d seats before the period's end, want 4", got)
	}
	b.screenshot(filepath.Join(shots, "dashboard-seats.png"))

	// Keep: the scheduled seats are cancelled.
	b.confirmInDialog("keep-plan", "Keep Pro?")
	b.waitText("status", "Kept Pro: the scheduled change is cancelled.")
	if v := h.subscriptionView(admin); v.ScheduledChange != nil || v.Quantity != 4 {
		t.Fatalf("after Keep: %+v", v)
	}
	b.wantNoScriptErrors()
}

// dashboardShots is where a dashboard test keeps its screenshots: the
// test's own directory, or docs/images with DASHBOARD_SCREENSHOT=1 (to
// refresh the documentation's).
func dashboardShots(t *testing.T) string {
	if os.Getenv("DASHBOARD_SCREENSHOT") == "1" {
		return filepath.Join("..", "docs", "images")
	}
	return screenshotDir(t)
}

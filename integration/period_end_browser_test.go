package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// Downgrades at the period's end (issue 21 part 2, contract §6) as a person
// sees them: in the dashboard and in billingd's MCP Apps view.

// TestPeriodEndDowngradeInDashboard: a downgrade "at the end of the period"
// is quoted with the date it happens and what is charged then, confirmed in
// the dialog, and leaves the plan as it was with the change shown as
// scheduled (and on the receipt, with its date); "Keep Scale" is a handshake
// of its own through the same dialog, and once confirmed nothing is
// scheduled any more.
func TestPeriodEndDowngradeInDashboard(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("later", "Later Shop", "scale")
	admin := h.admin("later", "lena")
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(admin)
	b.waitText("sub-plan", "Scale")

	// The downgrade to Pro, at the end of the period.
	b.do(chromedp.SetValue(chromedp.CSS(`select[data-focus-key="when:pro"]`), "period_end"))
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:pro"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	summary := b.text("confirm-summary")
	if pending := h.pendingSummaries(admin); !slices.Equal(pending, []string{summary}) {
		t.Fatalf("dialog shows %q, pending confirmations are %q", summary, pending)
	}
	periodEnd := h.periodEnd(admin)
	changesOn := b.eval(`day(` + jsString(periodEnd.Format(time.RFC3339)) + `)`)
	facts := b.text("confirm-facts")
	for _, want := range []string{"Changes on", changesOn, "Due now", "$0.00", "Charged on " + changesOn, "$19.00"} {
		if !strings.Contains(facts, want) {
			t.Errorf("the dialog's facts lack %q:\n%s", want, facts)
		}
	}
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("status", "Scheduled: the plan changes to Pro on "+changesOn+". Nothing changed now.")

	// The plan is unchanged; the panel shows the change and Keep.
	b.waitText("sub-plan", "Scale")
	b.do(chromedp.WaitVisible(chromedp.ID("scheduled")))
	b.waitText("scheduled-text", "Changes to Pro on "+changesOn+".")
	b.waitText("keep-plan", "Keep Scale")
	sub := h.subscriptionView(admin)
	if sub.Plan != "scale" || sub.ScheduledChange == nil || sub.ScheduledChange.To != "pro" ||
		!sub.ScheduledChange.At.Equal(periodEnd) || sub.ScheduledChange.ConfirmationID == "" {
		t.Fatalf("subscription after scheduling: %+v (period end %s)", sub, periodEnd)
	}
	// A schedule at Stripe, not a change of the subscription: nothing
	// changes or is charged before the renewal.
	h.wantStripeChanges(acct, 0)

	// Its receipt, signed now, names the date the plan changes.
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	if got := b.text("receipt-summary"); got != summary {
		t.Fatalf("receipt shows summary %q, the dialog showed %q", got, summary)
	}
	if sig := b.text("receipt-signature"); !strings.HasPrefix(sig, "Signature verified") {
		t.Fatalf("signature line %q", sig)
	}
	claims := b.text("receipt-claims")
	for _, want := range []string{"downgrade_plan: scale → pro", "Takes effect", changesOn, "the end of the period",
		"Due now", "$0.00", "Quoted for the renewal", "= $19.00", "Scheduled at", sub.ScheduledChange.ConfirmationID} {
		if !strings.Contains(claims, want) {
			t.Errorf("the receipt's claims lack %q:\n%s", want, claims)
		}
	}
	b.screenshot(screenshotDir(t) + "/scheduled.png")

	// Keep Scale: a proposal that cancels the scheduled change, confirmed in
	// the same dialog.
	b.do(chromedp.Click(chromedp.ID("keep-plan")))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	b.waitText("confirm-title", "Keep Scale?")
	keepSummary := b.text("confirm-summary")
	if pending := h.pendingSummaries(admin); !slices.Equal(pending, []string{keepSummary}) {
		t.Fatalf("dialog shows %q, pending confirmations are %q", keepSummary, pending)
	}
	if facts := b.text("confirm-facts"); !strings.Contains(facts, "Cancels") ||
		!strings.Contains(facts, "the change to Pro scheduled for "+changesOn) {
		t.Errorf("the keep dialog's facts: %q", facts)
	}
	b.wantFocus(`document.activeElement.id === "confirm-cancel"`)
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("status", "Kept Scale: the scheduled change is cancelled.")
	b.do(chromedp.WaitNotVisible(chromedp.ID("scheduled")))
	b.waitText("sub-plan", "Scale")
	if sub := h.subscriptionView(admin); sub.Plan != "scale" || sub.ScheduledChange != nil {
		t.Fatalf("subscription after keeping: %+v", sub)
	}
	h.wantStripeChanges(acct, 0)
	// The keep's receipt names the change it cancelled.
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	b.waitText("receipt-summary", keepSummary)
	if claims := b.text("receipt-claims"); !strings.Contains(claims, "Cancels") ||
		!strings.Contains(claims, "the change to pro scheduled for "+changesOn) {
		t.Errorf("the keep's receipt claims:\n%s", claims)
	}
	executed := 0
	for _, e := range h.auditEvents("later") {
		if e.Event == billing.EventOperationExecuted {
			executed++
		}
	}
	if executed != 2 {
		t.Errorf("%d OPERATION_EXECUTED events, want 2 (scheduled, kept)", executed)
	}
	b.wantNoScriptErrors()
}

// TestPeriodEndDowngradeInAppView: in billingd's MCP Apps view a
// downgrade_plan proposal with "at": "period_end" shows, beside the
// verbatim summary, the date the plan changes and what is charged then;
// Confirm schedules it and the view says it is scheduled for that date (the
// plan is unchanged); an upgrade_plan proposal back to the current plan
// reads as keeping it, and Confirm cancels the scheduled change.
func TestPeriodEndDowngradeInAppView(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "5m"))
	acct := h.createOrg("append", "Vector Build", "scale")
	host := startAppHost(t, h)
	token := h.mcpToken("append", "alice", "chat-host", auth.ScopeRead, auth.ScopeWrite)
	rest := h.user("append", "alice")
	b := newBrowser(t)
	periodEnd := h.periodEnd(rest)

	view := b.openViewAt(host, token, "downgrade_plan", "pro", "period_end")
	view.waitState("pending")
	if title := view.text("title"); title != "Confirm the downgrade at the end of the period" {
		t.Errorf("title %q", title)
	}
	if pending := h.pendingSummaries(h.admin("append", "root")); !slices.Equal(pending, []string{view.text("summary")}) {
		t.Fatalf("view shows %q, pending confirmations are %q", view.text("summary"), pending)
	}
	changesOn := viewDate(periodEnd)
	amounts := view.text("amounts")
	for _, want := range []string{"Due now\n$0.00", "Plan changes on\n" + changesOn, "Charged on " + changesOn + "\n$19.00"} {
		if !strings.Contains(amounts, want) {
			t.Errorf("the view's amounts lack %q:\n%s", want, amounts)
		}
	}
	if saw := b.eval(`window.modelSaw`); strings.Contains(saw, "pbc_") {
		t.Fatalf("the model's part of the first call holds a token: %s", saw)
	}
	view.click("confirm")
	view.waitState("scheduled")
	outcome := view.text("outcome")
	for _, want := range []string{"change to the pro plan is scheduled for " + changesOn, "stays on the scale plan", "nothing was charged now"} {
		if !strings.Contains(outcome, want) {
			t.Errorf("outcome %q lacks %q", outcome, want)
		}
	}
	if strings.Contains(outcome, "now on the") {
		t.Errorf("outcome %q says the plan changed now", outcome)
	}
	b.waitModelContext(`"view_state":"scheduled"`)
	sub := h.subscriptionView(rest)
	if sub.Plan != "scale" || sub.ScheduledChange == nil || sub.ScheduledChange.To != "pro" || !sub.ScheduledChange.At.Equal(periodEnd) {
		t.Fatalf("subscription after Confirm: %+v", sub)
	}
	h.wantStripeChanges(acct, 0)
	h.wantConsent("append", sub.ScheduledChange.ConfirmationID, billing.ConsentMCPAppView, billing.HumanAttested)

	// Keeping Scale, proposed by the agent as upgrade_plan to the current plan.
	view = b.openView(host, token, "upgrade_plan", "scale")
	view.waitState("pending")
	if title := view.text("title"); title != "Keep the scale plan?" {
		t.Errorf("keep title %q", title)
	}
	if amounts := view.text("amounts"); !strings.Contains(amounts, "Keeps\nscale") ||
		!strings.Contains(amounts, "Cancels\nthe change to pro scheduled for "+changesOn) {
		t.Errorf("keep amounts:\n%s", amounts)
	}
	view.click("confirm")
	view.waitState("done")
	if outcome := view.text("outcome"); !strings.Contains(outcome, "stays on the scale plan") || !strings.Contains(outcome, "scheduled change is cancelled") {
		t.Errorf("keep outcome %q", outcome)
	}
	if sub := h.subscriptionView(rest); sub.Plan != "scale" || sub.ScheduledChange != nil {
		t.Fatalf("subscription after keeping: %+v", sub)
	}
	h.wantStripeChanges(acct, 0)
	b.wantNoScriptErrors()
}

// periodEnd is the end of the subscription's current period, the instant a
// period-end downgrade takes effect.
func (h *harness) periodEnd(token string) time.Time {
	h.t.Helper()
	end := h.subscriptionView(token).CurrentPeriodEnd
	if end.IsZero() {
		h.t.Fatal("the subscription has no current_period_end")
	}
	return end
}

// viewDate is a timestamp's day as the MCP Apps view writes it (en-US,
// long month, UTC).
func viewDate(at time.Time) string {
	return at.UTC().Format("January 2, 2006")
}

package integration

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// agentsNeedApproval is a policy under which every call of the harness's
// tokens (client test-agent) needs another admin's approval.
const agentsNeedApproval = `{"agent_clients":["test-agent"],
	"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`

// Texts of the approval page (rest/web/approval.js) that the tests wait for.
const (
	approvedText = "Approved: 1 of 1 approved (wendy). The requester's next call makes the change; nothing has changed yet."
	rejectedText = "Rejected. The change will not be made; the requester's next call is refused."
	waitingText  = "Waiting for a decision"
)

// TestApprovalPageInBrowser drives the approval page (approval_url) in
// Chromium: an agent's change approved with the keyboard, then executed by
// the agent's second call; another rejected, so the second call is refused;
// the requester refused when it tries to approve its own change; and links
// that name nothing, or another org's change, say so.
func TestApprovalPageInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("apw", "Approvals Web", "pro")
	h.setPolicy("apw", agentsNeedApproval)
	agent := h.user("apw", "support-bot")
	admin := h.admin("apw", "wendy")
	shots := screenshotDir(t)
	b := newBrowser(t)

	// Approve: the admin signs in on the page the agent was given.
	up := h.proposeApproval(agent, "scale")
	wantStatus(t, h.confirm(agent, "upgrade", "scale", up.ConfirmToken), http.StatusConflict, "approval_pending")
	b.openApproval(h, up.ConfirmationID)
	b.signIn(admin)
	b.wantFocus(`document.activeElement.id === "approval-title"`)
	b.waitText("approval-summary", up.Summary) // verbatim
	b.wantApprovalFacts(up.ConfirmationID, "support-bot", "test-agent", waitingText)
	b.screenshot(filepath.Join(shots, "approval.png"))
	// By keyboard: from the heading, Tab reaches Approve; Enter presses it.
	b.do(chromedp.KeyEvent(kb.Tab))
	b.wantFocus(`document.activeElement.id === "approve"`)
	b.do(chromedp.KeyEvent(kb.Enter))
	b.waitText("decision", approvedText)
	b.waitText("approval-state", "Approved by wendy")
	b.wantFocus(`document.activeElement.id === "decision"`)
	b.screenshot(filepath.Join(shots, "approved.png"))
	wantStatus(t, h.confirm(agent, "upgrade", "scale", up.ConfirmToken), http.StatusOK, "")
	if sub := h.subscription(agent); sub != "scale" {
		t.Fatalf("plan %s after the approved change, want scale", sub)
	}

	// Reject: the tab keeps the token, so the next link opens signed in.
	down := h.proposeApprovalOf(agent, "downgrade", "pro")
	b.openApproval(h, down.ConfirmationID)
	b.waitText("approval-summary", down.Summary)
	b.do(chromedp.Click(chromedp.ID("reject")))
	b.waitText("decision", rejectedText)
	b.waitText("approval-state", "Rejected by wendy")
	b.wantDisabled("approve", "reject")
	wantStatus(t, h.confirm(agent, "downgrade", "pro", down.ConfirmToken), http.StatusConflict, "approval_rejected")

	// Self-approval: an admin's own change, refused on the page.
	// Sam asks through an agent, then opens the page in person.
	self := h.admin("apw", "sam")
	own := h.proposeApprovalOf(h.user("apw", "sam"), "downgrade", "free")
	b.signOut()
	b.openApproval(h, own.ConfirmationID)
	b.signIn(self)
	b.waitText("approval-summary", own.Summary)
	b.do(chromedp.Click(chromedp.ID("approve")))
	b.waitTextContains("decision", "(operation_denied)")
	b.waitText("approval-state", waitingText)
	b.wantDisabled("approve", "reject")
	b.wantFocus(`document.activeElement.id === "decision"`)
	b.screenshot(filepath.Join(shots, "self-approval.png"))
	if list := h.do("GET", "/api/billing/confirmations", admin, nil); !strings.Contains(string(list.Body), `"approval":"pending"`) {
		t.Fatalf("the refused self-approval changed the confirmation: %s", list.Body)
	}

	b.wantLinksRefused(h)
	names := strings.Join(eventNames(h.auditEvents("apw")), " ")
	if !strings.Contains(names, "APPROVAL_GRANTED") || !strings.Contains(names, "APPROVAL_REJECTED") {
		t.Errorf("audit: %s", names)
	}
	b.wantNoScriptErrors()
}

// TestTwoApproversInBrowser: under a rule asking for two approvers, the
// approval page shows how many approved and how many are needed; the first
// admin's approval leaves the change waiting (1 of 2, the second call
// still approval_pending), a second admin signed in on the same page sees
// it and completes it, and then the agent's second call executes.
func TestTwoApproversInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("duo", "Duo", "pro")
	h.setPolicy("duo", `{"agent_clients":["test-agent"],"approval_window_seconds":600,
		"rules":[{"name":"two humans","caller":"agent","action":"approve","approvals_required":2}]}`)
	agent := h.user("duo", "support-bot")
	shots := screenshotDir(t)
	b := newBrowser(t)

	up := h.proposeApproval(agent, "scale")
	b.openApproval(h, up.ConfirmationID)
	b.signIn(h.admin("duo", "wendy"))
	b.waitText("approval-summary", up.Summary)
	b.waitText("approval-progress", "0 of 2 approved")
	b.wantApprovalFacts(up.ConfirmationID, "support-bot", "test-agent", waitingText)
	b.do(chromedp.Click(chromedp.ID("approve")))
	b.waitText("decision", "Approved: 1 of 2 approved (wendy). The change waits for 1 more approver; nothing has changed yet.")
	b.waitText("approval-progress", "1 of 2 approved (wendy)")
	b.waitText("approval-state", "Waiting for more approvers")
	b.screenshot(filepath.Join(shots, "one-of-two.png"))
	wantStatus(t, h.confirm(agent, "upgrade", "scale", up.ConfirmToken), http.StatusConflict, "approval_pending")

	b.signOut()
	b.openApproval(h, up.ConfirmationID)
	b.signIn(h.admin("duo", "xavier"))
	b.waitText("approval-progress", "1 of 2 approved (wendy)") // what the first approver did, seen by the second
	b.do(chromedp.Click(chromedp.ID("approve")))
	b.waitText("decision", "Approved: 2 of 2 approved (wendy, xavier). The requester's next call makes the change; nothing has changed yet.")
	b.waitText("approval-state", "Approved by wendy, xavier")
	b.wantDisabled("approve", "reject")
	b.screenshot(filepath.Join(shots, "two-of-two.png"))

	wantStatus(t, h.confirm(agent, "upgrade", "scale", up.ConfirmToken), http.StatusOK, "")
	if sub := h.subscription(agent); sub != "scale" {
		t.Fatalf("plan %s after two approvals, want scale", sub)
	}
	b.wantNoScriptErrors()
}

// wantLinksRefused: an address that is no confirmation id never reaches
// the API; a well-formed id that is not pending in the org (unknown, or
// another org's) is reported as not there.
func (b *browser) wantLinksRefused(h *harness) {
	b.t.Helper()
	b.do(chromedp.Navigate(h.url + "/approvals/%3Cb%3Enot-an-id%3C%2Fb%3E"))
	b.do(chromedp.WaitVisible(chromedp.ID("bad-link")), chromedp.WaitNotVisible(chromedp.ID("account")))
	if id := b.text("approval-id"); id != "" {
		b.t.Errorf("a malformed id was shown: %q", id)
	}

	h.createOrg("rival", "Rival", "pro")
	h.setPolicy("rival", agentsNeedApproval)
	theirs := h.proposeApproval(h.user("rival", "rival-bot"), "scale")
	for _, id := range []string{"cfm_AAAAAAAAAAAAAAAAAAAAAA", theirs.ConfirmationID} {
		b.openApproval(h, id)
		b.do(chromedp.WaitVisible(chromedp.ID("approval-missing")))
		b.waitTextContains("approval-missing", "There is no change waiting for approval under this link")
		b.do(chromedp.WaitNotVisible(chromedp.ID("approval-details")))
	}
}

// TestApprovalPageExpiredInBrowser: the countdown runs out and the buttons
// go; a decision sent anyway (a tab whose timers were suspended, as on a
// sleeping laptop) gets consent_token_expired, shown on the page.
func TestApprovalPageExpiredInBrowser(t *testing.T) {
	// Not parallel: a 4 s token must outlive the page load.
	h := newHarness(t, withEnv("CONFIRM_TTL", "4s"))
	h.createOrg("late", "Late", "pro")
	h.setPolicy("late", agentsNeedApproval)
	b := newBrowser(t)
	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(h.admin("late", "wendy")) // before the proposal: its 4 seconds are for the page

	p := h.proposeApproval(h.user("late", "support-bot"), "scale")
	b.openApproval(h, p.ConfirmationID)
	b.waitText("approval-summary", p.Summary)
	b.waitText("approval-countdown", "Expired: the change can no longer be approved or made.")
	b.wantDisabled("approve", "reject")

	expires, err := time.Parse(time.RFC3339Nano, p.ExpiresAt)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(expires.Add(time.Second))) // past it on the server's clock too
	b.eval(`String(document.getElementById("approve").disabled = false)`)
	b.do(chromedp.Click(chromedp.ID("approve")))
	b.waitTextContains("decision", "(consent_token_expired)")
	b.screenshot(filepath.Join(screenshotDir(t), "expired.png"))
	b.wantNoScriptErrors()
}

// TestDashboardPendingApprovalsInBrowser: an admin's dashboard lists the
// changes waiting for approval (not plain confirmations) with the summary,
// requester, agent and a countdown; Review opens the approval page and the
// inline Approve lets the agent's second call execute. A token without
// billing:admin does not get the section.
func TestDashboardPendingApprovalsInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("dash", "Dash", "pro")
	h.setPolicy("dash", `{"rules":[{"name":"spending needs a human","amount_due_above_cents":100,"action":"approve"}]}`)
	agent := h.user("dash", "support-bot")
	up := h.proposeApproval(agent, "scale")
	h.propose(h.user("dash", "oscar"), "downgrade", "free") // nothing due: confirm, no approval
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(h.admin("dash", "wendy"))
	b.do(chromedp.WaitVisible(chromedp.ID("approvals-table")))
	rows := b.tableRows("approvals-list")
	if len(rows) != 1 || len(rows[0]) != 6 || rows[0][0] != up.Summary || rows[0][1] != "support-bot" || rows[0][2] != "test-agent" ||
		rows[0][3] != "0 of 1 approved" || !regexp.MustCompile(`^\d+:\d\d$`).MatchString(rows[0][4]) {
		t.Fatalf("pending approvals %q, want one row: summary %q, support-bot, test-agent, 0 of 1 approved, a countdown", rows, up.Summary)
	}
	b.screenshot(filepath.Join(screenshotDir(t), "dashboard-approvals.png"))

	review := `a[data-focus-key="review:` + up.ConfirmationID + `"]`
	if href := b.eval(`document.querySelector(` + jsString(review) + `).getAttribute("href")`); href != "/approvals/"+up.ConfirmationID {
		t.Fatalf("Review links to %q", href)
	}
	b.do(chromedp.Click(chromedp.CSS(review)), chromedp.WaitVisible(chromedp.ID("approval-details")))
	b.waitText("approval-summary", up.Summary) // signed in still: the tab keeps the token
	b.do(chromedp.Navigate(h.url + "/"))

	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="approve:` + up.ConfirmationID + `"]`)))
	b.waitText("status", "Approved the change support-bot asked for: 1 of 1 approved (wendy); their next call makes it.")
	b.do(chromedp.WaitVisible(chromedp.ID("approvals-empty")))
	b.wantFocus(`document.activeElement.id === "approvals-title"`)
	wantStatus(t, h.confirm(agent, "upgrade", "scale", up.ConfirmToken), http.StatusOK, "")

	b.signOut()
	b.signIn(h.user("dash", "oscar"))
	if hidden := b.eval(`String(document.getElementById("approvals").hidden)`); hidden != "true" {
		t.Errorf("a token without billing:admin sees the pending approvals")
	}
	b.wantNoScriptErrors()
}

// openApproval goes to a confirmation's approval page, as approval_url.
func (b *browser) openApproval(h *harness, id string) {
	b.t.Helper()
	b.do(chromedp.Navigate(h.url + "/approvals/" + id))
}

// wantApprovalFacts checks what the approval page says about the change.
func (b *browser) wantApprovalFacts(id, principal, client, state string) {
	b.t.Helper()
	got := []string{b.text("approval-id"), b.text("approval-principal"), b.text("approval-client"), b.text("approval-state")}
	if want := []string{id, principal, client, state}; strings.Join(got, "|") != strings.Join(want, "|") {
		b.t.Errorf("approval page shows %q, want %q", got, want)
	}
	if countdown := b.text("approval-countdown"); !regexp.MustCompile(`^\d+:\d\d \(until `).MatchString(countdown) {
		b.t.Errorf("countdown %q", countdown)
	}
}

func (b *browser) signOut() {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("sign-in")))
}

// waitTextContains waits until the element's text contains want.
func (b *browser) waitTextContains(id, want string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	expr := `document.getElementById(` + jsString(id) + `).textContent.includes(` + jsString(want) + `)`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		b.t.Fatalf("#%s never contained %q (it is %q): %v", id, want, b.text(id), err)
	}
}

func (b *browser) wantDisabled(ids ...string) {
	b.t.Helper()
	for _, id := range ids {
		if b.eval(`String(document.getElementById(`+jsString(id)+`).disabled)`) != "true" {
			b.t.Errorf("#%s is enabled", id)
		}
	}
}

// eval evaluates a JavaScript expression that yields a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// tableRows returns the trimmed cell texts of a table body's rows.
func (b *browser) tableRows(id string) [][]string {
	b.t.Helper()
	expr := `Array.from(document.getElementById(` + jsString(id) + `).rows, (r) => Array.from(r.cells, (c) => c.textContent.trim()))`
	rows, err := chromedp.Run(b.ctx, chromedp.Evaluate[[][]string](expr))
	if err != nil {
		b.t.Fatal(err)
	}
	return rows
}

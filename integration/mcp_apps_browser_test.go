package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// billingd's MCP Apps view in a real host in a real browser: Debian's
// Chromium loads integration/npmclient/apphost.html, a host made of the
// official pieces (the npm MCP client and ext-apps' AppBridge), which calls
// billingd, renders the view in a sandboxed iframe under the CSP the view
// declares, and hands it the tool result; the test presses the view's
// buttons like a person.

// TestMCPAppViewInBrowser: Confirm executes the change once; Cancel cancels;
// a proposal superseded by a newer one says so; one that waits for approval
// links the approval page and executes once approved; the model's part of
// the first call never holds the token. The screenshot of the proposal is
// docs/images/mcp-app-view.png (kept up to date with MCP_APP_SCREENSHOT=1).
func TestMCPAppViewInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "5m"))
	acct := h.createOrg("appweb", "Vector Build", "pro")
	host := startAppHost(t, h)
	token := h.mcpToken("appweb", "alice", "chat-host", auth.ScopeRead, auth.ScopeWrite)
	rest := h.user("appweb", "alice")
	b := newBrowser(t)

	// Confirm.
	view := b.openView(host, token, "upgrade_plan", "scale")
	view.waitState("pending")
	if pending := h.pendingSummaries(h.admin("appweb", "root")); !slices.Equal(pending, []string{view.text("summary")}) {
		t.Fatalf("view shows %q, pending confirmations are %q", view.text("summary"), pending)
	}
	if amounts := view.text("amounts"); !strings.Contains(amounts, "pro") || !strings.Contains(amounts, "scale") || !strings.Contains(amounts, "Due now") {
		t.Errorf("amounts %q", amounts)
	}
	if countdown := view.text("countdown"); !regexp.MustCompile(`^Expires in \d+:\d\d$`).MatchString(countdown) {
		t.Errorf("countdown %q", countdown)
	}
	if saw := b.eval(`window.modelSaw`); strings.Contains(saw, "pbc_") || !strings.Contains(saw, "confirmation_id") {
		t.Fatalf("the model's part of the first call: %s", saw)
	}
	b.screenshotView(t)
	view.click("confirm")
	view.waitState("done")
	if outcome := view.text("outcome"); !strings.Contains(outcome, "now on the scale plan") {
		t.Errorf("outcome %q", outcome)
	}
	if plan := h.subscription(rest); plan != "scale" {
		t.Fatalf("plan %s after Confirm, want scale", plan)
	}
	h.wantStripeChanges(acct, 1)
	b.waitModelContext(`"view_state":"done"`)
	// The receipt says the person pressed Confirm in billingd's own view.
	h.wantConsent("appweb", h.lastExecuted("appweb"), billing.ConsentMCPAppView, billing.HumanAttested)

	// Cancel.
	view = b.openView(host, token, "downgrade_plan", "pro")
	view.waitState("pending")
	view.click("cancel")
	view.waitState("cancelled")
	if pending := h.pendingIDs(rest); len(pending) != 0 {
		t.Fatalf("pending after Cancel: %v", pending)
	}

	// Superseded: a newer first call replaces the proposal on screen.
	view = b.openView(host, token, "downgrade_plan", "pro")
	view.waitState("pending")
	h.propose(rest, "downgrade", "pro")
	view.click("confirm")
	view.waitState("superseded")
	if plan := h.subscription(rest); plan != "scale" {
		t.Fatalf("plan %s after a superseded Confirm, want scale", plan)
	}
	h.wantStripeChanges(acct, 1)

	// Approval pending: the view says how many must approve and links the
	// approval page, which the host opens; Confirm waits until two other
	// admins approved, then executes.
	h.setPolicy("appweb", `{"rules":[{"name":"agents need two humans","caller":"agent","action":"approve","approvals_required":2}]}`)
	view = b.openView(host, token, "downgrade_plan", "free")
	view.waitState("approval-pending")
	view.waitTrue(`document.getElementById("approvers-needed").textContent === "2 other billing administrators"`)
	view.click("approval-link")
	waitCtx, cancelWait := context.WithTimeout(b.ctx, browserWait)
	_, err := chromedp.Run(waitCtx, chromedp.Poll[bool](`window.openedLinks.length > 0`))
	cancelWait()
	if err != nil {
		t.Fatalf("the view did not ask the host to open the approval page: %v", err)
	}
	if opened := b.eval(`window.openedLinks.join(" ")`); !strings.HasPrefix(opened, h.url+"/approvals/cfm_") {
		t.Fatalf("the host was asked to open %q, want the approval page", opened)
	}
	view.click("confirm")
	view.waitTrue(`document.getElementById("outcome").innerText.includes("not approved this change yet")`)
	for id := range h.pendingIDs(rest) {
		wantStatus(t, h.do("POST", "/api/billing/confirmations/"+id+"/approve", h.admin("appweb", "bob"), nil), http.StatusOK, "")
	}
	view.waitTrue(`(document.getElementById("outcome").innerText = "", true)`) // the answer below is the next Confirm's
	view.click("confirm")                                                      // one of two
	view.waitTrue(`!document.getElementById("confirm").disabled && document.getElementById("outcome").innerText.includes("not approved this change yet")`)
	for id := range h.pendingIDs(rest) {
		wantStatus(t, h.do("POST", "/api/billing/confirmations/"+id+"/approve", h.admin("appweb", "carol"), nil), http.StatusOK, "")
	}
	view.click("confirm")
	view.waitState("done")
	if plan := h.subscription(rest); plan != "free" {
		t.Fatalf("plan %s after an approved Confirm, want free", plan)
	}
	h.wantStripeChanges(acct, 2)
	// Approved by another person: the approval is what the record shows,
	// whichever button sent the second call.
	if k := h.wantConsent("appweb", h.lastExecuted("appweb"), billing.ConsentApproved, billing.HumanAttested); k.ApprovedBy != "bob, carol" {
		t.Fatalf("approved_by %q", k.ApprovedBy)
	}
	b.wantNoScriptErrors()
}

// TestMCPAppViewSeatsInBrowser: change_seats in billingd's own view, in
// Chromium: the view says what Confirm does in the words of seats (its
// title, the seats from → to, the plan kept, what is due now), and Confirm
// adds the seats at Stripe.
func TestMCPAppViewSeatsInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "5m"), withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("appseats", "Vector Build", "pro")
	sub := acct.Subscription.StripeSubscriptionID
	h.withSeats(sub, 2)
	host := startAppHost(t, h)
	token := h.mcpToken("appseats", "alice", "chat-host", auth.ScopeRead, auth.ScopeWrite)
	b := newBrowser(t)

	view := b.openViewWith(host, token, "change_seats", url.Values{"quantity": {"5"}}, "")
	view.waitState("pending")
	if title := view.text("title"); title != "Confirm adding seats" {
		t.Errorf("title %q", title)
	}
	if amounts := view.text("amounts"); !strings.Contains(amounts, "2 → 5") || !strings.Contains(amounts, "Due now") ||
		strings.Contains(amounts, "From") {
		t.Errorf("amounts %q", amounts)
	}
	if summary := view.text("summary"); !strings.HasPrefix(summary, "Add 3 seats to Vector Build's Pro plan") {
		t.Errorf("summary %q", summary)
	}
	b.screenshotViewAs(t, "mcp-app-view-seats.png")
	view.click("confirm")
	view.waitState("done")
	if got := h.seatsAtStripe(sub); got != 5 {
		t.Fatalf("Stripe has %d seats after Confirm, want 5", got)
	}
	if outcome := view.text("outcome"); !strings.Contains(outcome, "5 seats") {
		t.Errorf("outcome %q", outcome)
	}
	b.wantNoScriptErrors()
}

// TestMCPAppViewCancelAndResumeInBrowser: cancelling at the period's end
// and resuming in billingd's own view, in Chromium: the view says what
// Confirm does in their words, and Confirm makes each at Stripe.
func TestMCPAppViewCancelAndResumeInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "5m"))
	acct := h.createOrg("append", "Vector Build", "pro")
	sub := acct.Subscription.StripeSubscriptionID
	host := startAppHost(t, h)
	token := h.mcpToken("append", "alice", "chat-host", auth.ScopeRead, auth.ScopeWrite)
	b := newBrowser(t)

	view := b.openViewWith(host, token, "cancel_subscription", url.Values{}, "period_end")
	view.waitState("pending")
	if title := view.text("title"); title != "Cancel the subscription at the end of the period?" {
		t.Errorf("title %q", title)
	}
	if amounts := view.text("amounts"); !strings.Contains(amounts, "Access ends") {
		t.Errorf("amounts %q", amounts)
	}
	b.screenshotViewAs(t, "mcp-app-view-cancel.png")
	view.click("confirm")
	view.waitState("done")
	if outcome := view.text("outcome"); !strings.Contains(outcome, "then ends") {
		t.Errorf("outcome %q", outcome)
	}
	if s, _ := h.fake.Subscription(sub); !s.CancelAtPeriodEnd {
		t.Fatal("Stripe has no pending cancellation after Confirm")
	}

	view = b.openViewWith(host, token, "resume_subscription", url.Values{}, "")
	view.waitState("pending")
	if title := view.text("title"); title != "Resume the subscription?" {
		t.Errorf("title %q", title)
	}
	view.click("confirm")
	view.waitState("done")
	if s, _ := h.fake.Subscription(sub); s.CancelAtPeriodEnd {
		t.Fatal("Stripe still cancels at the period's end after Confirm")
	}
	b.wantNoScriptErrors()
}

// TestMCPAppViewExpiresInBrowser: when the countdown runs out the view says
// the proposal expired and offers no button; nothing changes.
func TestMCPAppViewExpiresInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "3s"))
	acct := h.createOrg("appold", "Old", "pro")
	host := startAppHost(t, h)
	b := newBrowser(t)
	view := b.openView(host, h.mcpToken("appold", "alice", "chat-host", auth.ScopeRead, auth.ScopeWrite), "upgrade_plan", "scale")
	view.waitState("expired")
	view.waitTrue(`document.getElementById("buttons").hidden`)

	if plan := h.subscription(h.user("appold", "alice")); plan != "pro" {
		t.Fatalf("plan %s", plan)
	}
	h.wantStripeChanges(acct, 0)
}

// startAppHost serves the test host page, its script bundled by the pinned
// esbuild, and /mcp proxied to billingd, all on one origin as a chat host's
// backend would be.
func startAppHost(t *testing.T, h *harness) string {
	t.Helper()
	nodeWithSDK(t)
	esbuild := filepath.Join(npmClientDir, "node_modules", ".bin", "esbuild")
	if _, err := os.Stat(filepath.Join(npmClientDir, "node_modules", "@modelcontextprotocol", "ext-apps", "package.json")); err != nil {
		skipOrFail(t, "the npm MCP Apps host packages are not installed (npm ci --prefix integration/npmclient): %v", err)
	}
	bundle := filepath.Join(t.TempDir(), "apphost.js")
	out, err := exec.Command(esbuild, filepath.Join(npmClientDir, "apphost.mjs"), "--bundle", "--format=esm",
		"--platform=browser", "--log-level=warning", "--outfile="+bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("esbuild: %v\n%s", err, out)
	}
	target, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", httputil.NewSingleHostReverseProxy(target))
	mux.HandleFunc("/apphost.html", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(npmClientDir, "apphost.html"))
	})
	mux.HandleFunc("/apphost.js", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, bundle) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// viewFrame is billingd's view inside the host page's iframe. Chromium runs
// the sandboxed iframe (an opaque origin) in a process of its own, as a
// target whose id is the iframe's frame id: the view is driven through a
// context attached to it.
type viewFrame struct {
	t   *testing.T
	ctx context.Context
}

// openView loads the host page, which makes the first call of tool and
// renders the view, and returns the view once the host has handed it the
// result.
func (b *browser) openView(host, token, tool, to string) *viewFrame {
	b.t.Helper()
	return b.openViewAt(host, token, tool, to, "")
}

// openViewAt is openView for a first call that also has the argument at
// (downgrade_plan's "now" or "period_end"), unless at is empty.
func (b *browser) openViewAt(host, token, tool, to, at string) *viewFrame {
	b.t.Helper()
	return b.openViewWith(host, token, tool, url.Values{"to": {to}}, at)
}

// openViewWith is openView for a first call with the arguments args (to,
// or quantity) and at, unless empty.
func (b *browser) openViewWith(host, token, tool string, args url.Values, at string) *viewFrame {
	b.t.Helper()
	q := url.Values{"token": {token}, "tool": {tool}}
	for k, v := range args {
		q[k] = v
	}
	if at != "" {
		q.Set("at", at)
	}
	b.do(chromedp.Navigate(host + "/apphost.html?" + q.Encode()))
	b.waitText("host-status", "view ready")
	nodes, err := chromedp.Run(b.ctx, chromedp.Nodes(chromedp.ID("app-frame")))
	if err != nil || len(nodes) != 1 || nodes[0].FrameID == "" {
		b.t.Fatalf("the host's iframe: %v", err)
	}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(target.ID(nodes[0].FrameID)))
	b.t.Cleanup(cancel)
	// Attach now, on the context's own lifetime: chromedp reads the target's
	// messages on the context of the first Run.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`true`)); err != nil {
		b.t.Fatalf("attach to the view: %v", err)
	}
	return &viewFrame{t: b.t, ctx: ctx}
}

// waitTrue waits until expr is true in the view.
func (v *viewFrame) waitTrue(expr string) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(v.ctx, browserWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		v.t.Fatalf("in the view, %s never became true: %v", expr, err)
	}
}

func (v *viewFrame) text(id string) string {
	v.t.Helper()
	s, err := chromedp.Run(v.ctx, chromedp.Evaluate[string](`document.getElementById(`+jsString(id)+`)?.innerText ?? ""`))
	if err != nil {
		v.t.Fatalf("in the view, the text of #%s: %v", id, err)
	}
	return strings.TrimSpace(s)
}

func (v *viewFrame) waitState(state string) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(v.ctx, browserWait)
	defer cancel()
	expr := `document.getElementById("view")?.dataset.state === ` + jsString(state)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		v.t.Fatalf("the view never showed %q (it shows %q): %v", state, v.text("view"), err)
	}
}

// click presses the element like a person, once it is inside the iframe.
// The host sizes the iframe to the view's content when the view reports its
// size, a moment after it rendered (a new host page's iframe is first as
// small as the view's "waiting" line): a click before that lands outside
// the frame, on nothing, and the view never sees it.
func (v *viewFrame) click(id string) {
	v.t.Helper()
	v.waitTrue(`(() => { const r = document.getElementById(` + jsString(id) + `).getBoundingClientRect();
		return r.height > 0 && r.bottom <= innerHeight && r.right <= innerWidth; })()`)
	if _, err := chromedp.Run(v.ctx, chromedp.Click(chromedp.ID(id))); err != nil {
		v.t.Fatal(err)
	}
}

// waitModelContext waits until the view has told the model (through the
// host) something containing want, and checks it never told it a token.
func (b *browser) waitModelContext(want string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.modelContext.some((u) => u.includes(`+jsString(want)+`))`)); err != nil {
		b.t.Fatalf("the view never told the model %s (it told it %s): %v", want, b.eval(`window.modelContext.join("\n")`), err)
	}
	if told := b.eval(`window.modelContext.join("\n")`); strings.Contains(told, "pbc_") {
		b.t.Fatalf("the view told the model a token: %s", told)
	}
}

// screenshotView saves the host page with the view, to the test's
// directory, or to docs/images/mcp-app-view.png with MCP_APP_SCREENSHOT=1.
func (b *browser) screenshotView(t *testing.T) {
	t.Helper()
	b.screenshotViewAs(t, "mcp-app-view.png")
}

// screenshotViewAs keeps a screenshot of the view under name.
func (b *browser) screenshotViewAs(t *testing.T, name string) {
	t.Helper()
	path := filepath.Join(screenshotDir(t), name)
	if os.Getenv("MCP_APP_SCREENSHOT") == "1" {
		path = filepath.Join("..", "docs", "images", name)
	}
	png, err := chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.ID("app-frame")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestDashboardInBrowser drives the dashboard in Debian's Chromium: sign in
// with a pasted token, upgrade through the confirmation dialog, back out of
// two more changes (Cancel button, Escape key) and cancel a pending
// confirmation from the list; the page, the API and the audit log agree.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("web", "Web Shop", "pro")
	admin := h.admin("web", "wendy")
	// A pending confirmation of someone else's, for the admin's list.
	other := h.propose(h.user("web", "oscar"), "downgrade", "free")
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(admin)
	b.waitText("sub-plan", "Pro")

	// Upgrade: the dialog shows the summary verbatim and a countdown; focus
	// is inside it, on Cancel.
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:scale"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	summary := b.text("confirm-summary")
	if pending := h.pendingSummaries(admin); !slices.Contains(pending, summary) {
		t.Fatalf("dialog shows %q, pending confirmations are %q", summary, pending)
	}
	if countdown := b.text("confirm-countdown"); !regexp.MustCompile(`^Expires in \d+:\d\d `).MatchString(countdown) {
		t.Errorf("countdown %q", countdown)
	}
	b.wantFocus(`document.activeElement.id === "confirm-cancel"`)
	shots := screenshotDir(t)
	b.screenshot(filepath.Join(shots, "dialog.png"))
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("sub-plan", "Scale")
	b.waitText("status", "Done: the plan is now Scale.")
	// The page goes on to show the change's receipt, which moves the
	// layout: wait for it before clicking anything else.
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	if sub := h.subscription(admin); sub != "scale" {
		t.Fatalf("subscription %s after confirming, want scale", sub)
	}

	// Another change, cancelled with the Cancel button.
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:pro"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	b.do(chromedp.Click(chromedp.ID("confirm-cancel")))
	b.waitText("status", "Cancelled. Nothing was changed.")

	// And one dismissed with Escape: cancelled too, focus back on its button.
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:free"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	b.do(chromedp.KeyEvent(kb.Escape))
	b.do(chromedp.WaitNotVisible(chromedp.ID("confirm-dialog")))
	b.waitText("status", "Cancelled. Nothing was changed.")
	b.wantFocus(`document.activeElement.dataset.focusKey === "plan:free"`)

	// Oscar's pending confirmation, cancelled from the list.
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="cancel:` + other.ConfirmationID + `"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("pending-empty")))
	b.waitText("status", "Confirmation cancelled. Nothing was changed.")

	body := b.text("account")
	for _, want := range []string{"Scale", "No pending confirmations.", "Audit log", "OPERATION_EXECUTED", "TOKEN_REVOKED"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if sub, pending := h.subscription(admin), h.pendingSummaries(admin); sub != "scale" || len(pending) != 0 {
		t.Errorf("after the session: plan %s, pending %q; want scale and none", sub, pending)
	}
	wantEvents(t, h.auditEvents("web"),
		"TOKEN_ISSUED", "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED",
		"TOKEN_ISSUED", "TOKEN_REVOKED:cancelled", "TOKEN_ISSUED", "TOKEN_REVOKED:cancelled", "TOKEN_REVOKED:cancelled")
	b.screenshot(filepath.Join(shots, "dashboard.png"))
	b.wantNoScriptErrors()
}

// browserWait bounds how long a browser test waits for the page to reach a
// state: it waits for the state, and the bound only ends a failing wait.
// It is generous because CI runs the browser tests beside the full sweep on
// two cores, where a page can take tens of seconds to render.
const browserWait = 60 * time.Second

// browser is one headless Chromium tab for a test.
type browser struct {
	t          *testing.T
	ctx        context.Context
	exceptions func() []string
}

// chromiumPath finds Debian's Chromium; without it the test skips, except
// in CI, where a missing browser is a failure (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (apt-get install chromium)")
	}
	t.Skip("chromium not found; apt-get install chromium to run the browser test")
	return ""
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	profile := t.TempDir() // before the allocator, so it is removed after Chromium exits
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.UserDataDir(profile), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true))
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	b := &browser{t: t, ctx: ctx}
	b.exceptions = collectExceptions(ctx)
	return b
}

// collectExceptions records uncaught script errors (a script blocked by the
// CSP breaks the page, which then throws).
func collectExceptions(ctx context.Context) func() []string {
	thrown := chromedp.Events(ctx, runtime.ExceptionThrown)
	var mu sync.Mutex
	var found []string
	go func() {
		for ev, err := range thrown {
			if err != nil {
				return
			}
			mu.Lock()
			found = append(found, ev.ExceptionDetails.Text)
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(found)
	}
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#sign-in-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("account")))
	b.waitText("status", "Signed in.")
}

// confirmInDialog clicks the dashboard's button, checks the title of the
// confirm dialog it opens, and confirms.
func (b *browser) confirmInDialog(button, wantTitle string) {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.ID(button)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	if title := b.text("confirm-title"); title != wantTitle {
		b.t.Errorf("%s: confirm dialog titled %q, want %q", button, title, wantTitle)
	}
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
}

func (b *browser) text(id string) string {
	b.t.Helper()
	text, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimSpace(text)
}

// waitText waits until the element's text is want.
func (b *browser) waitText(id, want string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	expr := `document.getElementById(` + jsString(id) + `).textContent.trim() === ` + jsString(want)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		b.t.Fatalf("#%s never became %q (it is %q): %v", id, want, b.text(id), err)
	}
}

func (b *browser) wantFocus(expr string) {
	b.t.Helper()
	ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil || !ok {
		active, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.activeElement.outerHTML.slice(0, 200)`))
		b.t.Fatalf("focus: %s is false (focus is on %s): %v", expr, active, err)
	}
}

func (b *browser) screenshot(path string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // 100: PNG; below 100 it is a JPEG
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o600); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

func (b *browser) wantNoScriptErrors() {
	b.t.Helper()
	if errs := b.exceptions(); len(errs) > 0 {
		b.t.Errorf("script errors in the page: %q", errs)
	}
}

// screenshotDir is the test's temp dir, or BROWSER_SCREENSHOT_DIR to keep
// the picture after the test.
func screenshotDir(t *testing.T) string {
	if dir := os.Getenv("BROWSER_SCREENSHOT_DIR"); dir != "" {
		return dir
	}
	return t.TempDir()
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// pendingSummaries lists the summaries of the org's pending confirmations
// (all of them: token is an admin's).
func (h *harness) pendingSummaries(token string) []string {
	h.t.Helper()
	var body struct {
		Confirmations []struct{ Summary string } `json:"confirmations"`
	}
	r := h.do("GET", "/api/billing/confirmations", token, nil)
	wantStatus(h.t, r, http.StatusOK, "")
	r.decode(h.t, &body)
	summaries := []string{}
	for _, c := range body.Confirmations {
		summaries = append(summaries, c.Summary)
	}
	return summaries
}

package integration

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/receipt"
)

// TestMandatesPageInBrowser: a person grants a standing mandate on
// billingd's own page in Chromium, after a fresh sign-in at the identity
// provider (max_age=0), sees the bounds in words before granting, keeps
// the signed mandate (it verifies with the published keys); the agent's
// covered first call then executes at once, the page shows what it spent,
// and a revoke there ends it. A grant once the page's sign-in is older
// than five minutes, or a form without the session's CSRF token, grants
// nothing.
func TestMandatesPageInBrowser(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("mbp", "Mandate Page", "pro")
	h.signInPeople("mbp", nil, "alice")
	quoted := h.propose(h.user("mbp", "quoter"), "upgrade", "scale").Details.AmountDueNowCents
	b := newBrowser(t)
	shots := screenshotDir(t)

	b.do(chromedp.Navigate(h.url + "/mandates"))
	b.loginAs("alice", true)
	b.do(chromedp.WaitVisible(chromedp.ID("mandate-client")))
	b.do(chromedp.SetValue(chromedp.ID("mandate-client"), "test-agent"),
		chromedp.Click(chromedp.ID("mandate-op-upgrade")), chromedp.Click(chromedp.ID("mandate-plan-scale")),
		chromedp.SetValue(chromedp.ID("mandate-max"), "40"), chromedp.SetValue(chromedp.ID("mandate-budget"), "100.50"),
		chromedp.SetValue(chromedp.ID("mandate-changes"), "2"), chromedp.SetValue(chromedp.ID("mandate-days"), "30"),
		chromedp.Click(chromedp.ID("mandate-review")), chromedp.WaitVisible(chromedp.ID("mandate-words")))
	words := b.text("mandate-words")
	for _, want := range []string{"test-agent may upgrade to scale", "at most $40.00 charged now per change and $100.50 in all", "at most 2 changes"} {
		if !strings.Contains(words, want) {
			t.Fatalf("the review says %q; missing %q", words, want)
		}
	}
	b.screenshot(filepath.Join(shots, "mandate-review.png"))

	// CSRF: the same session, a grant without the token.
	cookie := b.sessionCookie(h)
	forged := url.Values{"action": {"grant"}, "csrf_token": {"not-the-token"}, "client": {"test-agent"},
		"operations": {"upgrade_plan"}, "to_plans": {"scale"}, "max_amount_due_cents": {"999999"},
		"budget_cents": {"999999"}, "max_changes": {"9"}, "expires_at": {"2030-01-01T00:00:00Z"}}
	if r := h.withCookie(cookie, "POST", "/mandates", forged); r.Status != http.StatusOK ||
		!strings.Contains(string(r.Body), "did not come from billingd") {
		t.Fatalf("a forged form: %d %s", r.Status, r.Body)
	}

	b.do(chromedp.Click(chromedp.ID("mandate-grant")), chromedp.WaitVisible(chromedp.ID("mandate-granted-id")))
	id := b.text("mandate-granted-id")
	claims, err := receipt.VerifyMandate(b.text("mandate-jws"), h.receiptKeys())
	if err != nil {
		t.Fatalf("the signed mandate: %v", err)
	}
	if claims.MandateID != id || claims.Subject != "alice" || claims.BudgetCents != 10050 || claims.MaxAmountDueCents != 4000 ||
		claims.MaxChanges != 2 || claims.Client != "test-agent" {
		t.Fatalf("claims %+v", claims)
	}
	b.screenshot(filepath.Join(shots, "mandate-granted.png"))

	// The agent's covered first call executes at once; the page shows it.
	r, a := h.firstCall(h.user("mbp", "alice"), "upgrade", "scale")
	wantStatus(t, r, http.StatusOK, "")
	if a.MandateID != id {
		t.Fatalf("answer %s", r.Body)
	}
	b.do(chromedp.Navigate(h.url+"/mandates"), chromedp.WaitVisible(chromedp.ID("mandate-"+id)))
	if got, want := b.text("mandate-spent-"+id), formatUSD(quoted)+" spent in 1 change"; got != want {
		t.Fatalf("spent %q, want %q", got, want)
	}

	// Revoke on the page: the agent's next covered call is the ordinary
	// handshake.
	b.do(chromedp.Click(chromedp.ID("mandate-revoke-"+id)), chromedp.WaitVisible(chromedp.ID("mandates-message")))
	b.waitText("mandate-status-"+id, "revoked")
	r, a = h.firstCall(h.user("mbp", "alice"), "downgrade", "pro")
	wantStatus(t, r, http.StatusAccepted, "")

	// A sign-in older than five minutes grants nothing: the page offers a
	// new one.
	b.do(chromedp.SetValue(chromedp.ID("mandate-client"), "test-agent"),
		chromedp.Click(chromedp.ID("mandate-op-upgrade")), chromedp.Click(chromedp.ID("mandate-plan-scale")),
		chromedp.SetValue(chromedp.ID("mandate-max"), "1"), chromedp.SetValue(chromedp.ID("mandate-budget"), "1"),
		chromedp.SetValue(chromedp.ID("mandate-changes"), "1"), chromedp.SetValue(chromedp.ID("mandate-days"), "1"),
		chromedp.Click(chromedp.ID("mandate-review")), chromedp.WaitVisible(chromedp.ID("mandate-grant")))
	h.exec(t, `UPDATE web_sessions SET verify_auth_time = now() - interval '10 minutes'`)
	b.do(chromedp.Click(chromedp.ID("mandate-grant")), chromedp.WaitVisible(chromedp.ID("mandates-again")))
	if msg := b.text("mandates-message"); !strings.Contains(msg, "insufficient_user_authentication") {
		t.Fatalf("a stale sign-in was told %q", msg)
	}
	if n := strings.Count(string(h.do("GET", "/api/billing/mandates", h.user("mbp", "alice"), nil).Body), `"id":"mdt_`); n != 1 {
		t.Fatalf("%d mandates, want the one granted", n)
	}
	b.do(chromedp.Click(chromedp.ID("mandates-again")))
	b.loginAs("alice", true)
	b.do(chromedp.WaitVisible(chromedp.ID("mandate-client")))
	b.wantNoScriptErrors()
}

// TestMandatesPageNeedsTheScopes: the page grants and revokes only for a
// sign-in with billing:write and lists only with billing:read, as the REST
// routes do: a person whose sign-in allows reading alone, with the page's
// own CSRF token, grants nothing.
func TestMandatesPageNeedsTheScopes(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("mps", "Mandate Scopes", "pro")
	h.issuer.SetUsers(devissuer.User{Subject: "reader", Org: "mps", Scopes: []string{auth.ScopeRead}})
	b := newBrowser(t)
	b.do(chromedp.Navigate(h.url + "/mandates"))
	b.loginAs("reader", true)
	b.do(chromedp.WaitVisible(chromedp.ID("mandate-client")))
	csrf := b.eval(`document.querySelector('input[name=csrf_token]').value`)
	if csrf == "" {
		t.Fatal("no CSRF token on the page")
	}
	grant := url.Values{"action": {"grant"}, "csrf_token": {csrf}, "client": {"test-agent"},
		"operations": {"upgrade_plan"}, "to_plans": {"scale"}, "max_amount_due_cents": {"100"},
		"budget_cents": {"100"}, "max_changes": {"1"}, "expires_at": {time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)}}
	r := h.withCookie(b.sessionCookie(h), "POST", "/mandates", grant)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "lacks billing:write") {
		t.Fatalf("a grant by a read-only sign-in: %d %s", r.Status, r.Body)
	}
	var n int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM mandates WHERE org = 'mps'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d mandates granted (%v), want none", n, err)
	}
}

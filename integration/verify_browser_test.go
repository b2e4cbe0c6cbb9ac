package integration

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/billing"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// signInPeople makes the harness's issuer a test identity provider whose
// login page offers these people of org.
func (h *harness) signInPeople(org string, admins []string, users ...string) {
	var people []devissuer.User
	for _, u := range users {
		people = append(people, devissuer.User{Subject: u, Org: org, Scopes: []string{auth.ScopeRead, auth.ScopeWrite}})
	}
	for _, a := range admins {
		people = append(people, devissuer.User{Subject: a, Org: org, Scopes: []string{auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin}})
	}
	h.issuer.SetUsers(people...)
}

// loginAs picks a person on the test identity provider's login page, which
// the browser must be on (or be going to).
func (b *browser) loginAs(subject string, fresh bool) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("user-"+subject))); err != nil {
		b.t.Fatalf("no login page with %s (at %s: %q): %v", subject, b.eval(`location.href`), b.eval(`document.body.innerText.slice(0, 300)`), err)
	}
	if fresh {
		// billingd asked for a new authentication (max_age=0, prompt=login).
		b.do(chromedp.WaitVisible(chromedp.ID("fresh")))
	}
	b.do(chromedp.Click(chromedp.ID("user-" + subject)))
}

// TestVerifyPageInBrowser: the verification page (verify_url) in Chromium
// against the dev issuer as the identity provider. Someone else signed in
// is refused and sees nothing of the change; the requester signs in afresh,
// sees the exact summary and confirms; then the agent's own second call,
// with its old token, executes. A form or API call with the session cookie
// but without its CSRF token is refused.
func TestVerifyPageInBrowser(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("vpg", "Verify Page", "pro")
	h.setPolicy("vpg", `{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}`)
	h.signInPeople("vpg", nil, "vera", "mallory")
	agent := h.user("vpg", "vera") // no auth_time: an agent's long-lived token
	p := h.proposeVerify(agent, "upgrade", "scale")
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusUnauthorized, "insufficient_user_authentication")
	b := newBrowser(t)
	shots := screenshotDir(t)

	// Someone else opens the link: signs in, and is refused.
	b.do(chromedp.Navigate(p.VerifyURL))
	b.loginAs("mallory", true)
	b.do(chromedp.WaitVisible(chromedp.ID("verify-message")))
	if msg := b.text("verify-message"); !strings.Contains(msg, "only the person who asked") {
		t.Fatalf("another person was told %q", msg)
	}
	if b.eval(`String(document.getElementById("verify-summary") === null && document.querySelector("form") === null)`) != "true" {
		t.Fatal("the page showed another person the change or a form")
	}

	// The requester: a fresh sign-in, the exact summary, Confirm.
	b.do(chromedp.Click(chromedp.ID("verify-again")))
	b.loginAs("vera", true)
	b.do(chromedp.WaitVisible(chromedp.ID("verify-confirm")))
	if got := b.text("verify-summary"); got != p.Summary {
		t.Fatalf("summary %q, want %q", got, p.Summary)
	}
	if got := b.text("verify-subject") + "|" + b.text("verify-principal") + "|" + b.text("verify-client"); got != "vera|vera|test-agent" {
		t.Fatalf("facts %q", got)
	}
	b.screenshot(filepath.Join(shots, "verify.png"))

	// CSRF: the same session, a request without the token.
	cookie := b.sessionCookie(h)
	forged := url.Values{"decision": {"confirm"}, "csrf_token": {"not-the-token"}}
	if r := h.withCookie(cookie, "POST", "/verify/"+p.ConfirmationID, forged); r.Status != http.StatusOK ||
		!strings.Contains(string(r.Body), "did not come from billingd") {
		t.Fatalf("a forged form: %d %s", r.Status, r.Body)
	}
	if r := h.withCookie(cookie, "POST", "/api/billing/confirmations/"+p.ConfirmationID+"/cancel", nil); r.Status != http.StatusForbidden {
		t.Fatalf("an API call with the cookie and no CSRF token: %d %s", r.Status, r.Body)
	}

	b.do(chromedp.Click(chromedp.ID("verify-confirm")), chromedp.WaitVisible(chromedp.ID("verify-message")))
	b.waitText("verify-message", "Confirmed. Your agent's next call makes this change; nothing has changed yet.")
	b.screenshot(filepath.Join(shots, "verified.png"))
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	if plan := h.subscription(agent); plan != "scale" {
		t.Fatalf("plan %s after verification", plan)
	}
	names := strings.Join(eventNames(h.auditEvents("vpg")), " ")
	if !strings.Contains(names, "USER_VERIFIED:page") || !strings.Contains(names, "OPERATION_EXECUTED") {
		t.Fatalf("audit: %s", names)
	}
	// The agent made the second call, but the record shows the person's
	// fresh sign-in on the page.
	if k := h.wantConsent("vpg", p.ConfirmationID, billing.ConsentVerifiedSignIn, billing.HumanVerified); k.AuthTime == nil {
		t.Fatalf("verified consent without auth_time: %+v", k)
	}

	// Decline: the change is cancelled and the agent's call refused.
	down := h.proposeVerify(agent, "downgrade", "pro")
	b.do(chromedp.Navigate(down.VerifyURL))
	b.loginAs("vera", true)
	b.do(chromedp.WaitVisible(chromedp.ID("verify-decline")), chromedp.Click(chromedp.ID("verify-decline")),
		chromedp.WaitVisible(chromedp.ID("verify-message")))
	b.waitText("verify-message", "Declined. The change is cancelled and will not be made.")
	wantStatus(t, h.confirm(agent, "downgrade", "pro", down.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	b.wantNoScriptErrors()
}

// TestSignInDashboardInBrowser: billingd serve's pages offer no token
// paste; a person signs in at the identity provider, the dashboard works
// on the session (including a state change, which carries the CSRF token),
// an admin approves on the approval page with their sign-in recorded, and
// sign-out ends the session.
func TestSignInDashboardInBrowser(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("sid", "Sign In", "pro")
	h.setPolicy("sid", agentsNeedApproval)
	h.signInPeople("sid", []string{"wendy"}, "oscar")
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.do(chromedp.WaitVisible(chromedp.ID("oidc-sign-in")))
	if b.eval(`String(document.getElementById("token") === null)`) != "true" {
		t.Fatal("billingd serve offers the pasted-token sign-in")
	}
	up := h.proposeApproval(h.user("sid", "support-bot"), "scale")
	b.openApproval(h, up.ConfirmationID)
	b.do(chromedp.WaitVisible(chromedp.ID("oidc-sign-in")), chromedp.Click(chromedp.ID("oidc-sign-in")))
	b.loginAs("wendy", false)
	b.do(chromedp.WaitVisible(chromedp.ID("approval-details")))
	b.waitText("approval-summary", up.Summary)
	b.do(chromedp.Click(chromedp.ID("approve")))
	b.waitText("decision", approvedText)
	r := h.do("GET", "/api/billing/confirmations", h.admin("sid", "auditor"), nil)
	if !strings.Contains(string(r.Body), `"approver":"wendy"`) {
		t.Fatalf("approval: %s", r.Body)
	}
	var authTime time.Time
	if err := h.app.Pool.QueryRow(t.Context(), `SELECT approver_auth_time FROM confirmations WHERE id = $1`,
		up.ConfirmationID).Scan(&authTime); err != nil || time.Since(authTime) > time.Minute {
		t.Fatalf("approver auth_time %v: %v", authTime, err)
	}

	b.do(chromedp.Navigate(h.url + "/"))
	b.do(chromedp.WaitVisible(chromedp.ID("account")))
	b.waitText("sub-plan", "Pro")
	signedIn := b.sessionCookie(h)
	b.do(chromedp.Click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("oidc-sign-in")))
	if r := h.withCookie(signedIn, "GET", "/auth/session", nil); strings.Contains(string(r.Body), `"signed_in":true`) {
		t.Fatalf("session after sign-out: %s", r.Body)
	}
	b.wantNoScriptErrors()
}

// sessionCookie is the browser's billingd session cookie.
func (b *browser) sessionCookie(h *harness) *http.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{h.url}})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == "billingd_session" {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteLax {
				b.t.Fatalf("session cookie not HttpOnly/SameSite=Lax: %+v", c)
			}
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	b.t.Fatal("no session cookie")
	return nil
}

// withCookie sends a request with a session cookie (a form body when form
// is set).
func (h *harness) withCookie(cookie *http.Cookie, method, path string, form url.Values) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		h.t.Fatal(err)
	}
	req.AddCookie(cookie)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return h.roundTrip(req)
}

// TestSignInCallbackRefused: a callback is accepted only for a state
// billingd issued, to the same browser (its login cookie), once: a login
// CSRF (an attacker's callback URL opened in the victim's browser) and a
// replayed callback get no session.
func TestSignInCallbackRefused(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(h.url + "/auth/login?return_to=/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc.String(), h.issuer.IssuerURL()+"/authorize?") {
		t.Fatalf("login: %d %s", resp.StatusCode, loc)
	}
	q := loc.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("redirect_uri") != h.url+"/auth/callback" {
		t.Fatalf("authorization request %s", loc)
	}
	var login *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "billingd_login" {
			login = c
		}
	}
	if login == nil || !login.HttpOnly || login.SameSite != http.SameSiteLaxMode {
		t.Fatalf("login cookie %+v", login)
	}
	callback := "/auth/callback?code=whatever&state=" + url.QueryEscape(q.Get("state"))
	for _, try := range []struct {
		name   string
		cookie *http.Cookie
	}{
		{"another browser's cookie", &http.Cookie{Name: "billingd_login", Value: "not-the-browser"}}, // leaves it alone
		{"a code the issuer never gave", login},                                                      // uses the state up
		{"replayed state", login},
	} {
		name := try.name
		r := h.withCookie(try.cookie, "GET", callback, nil)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "The sign-in did not complete") || len(r.Header.Values("Set-Cookie")) > 1 ||
			strings.Contains(strings.Join(r.Header.Values("Set-Cookie"), ";"), "billingd_session=") {
			t.Fatalf("%s: %d %q", name, r.Status, r.Header.Values("Set-Cookie"))
		}
	}
}

// TestVerifyPageACRInBrowser: with VERIFY_ACR_VALUES, a fresh sign-in of
// the wrong class (the dev issuer's password) does not verify; one with a
// passkey does.
func TestVerifyPageACRInBrowser(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("VERIFY_ACR_VALUES", devissuer.StrongACR))
	h.createOrg("vac", "Verify ACR", "pro")
	h.setPolicy("vac", `{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}`)
	h.signInPeople("vac", nil, "vera")
	agent := h.user("vac", "vera")
	p := h.proposeVerify(agent, "upgrade", "scale")
	b := newBrowser(t)

	b.do(chromedp.Navigate(p.VerifyURL))
	b.loginAs("vera", true)
	b.do(chromedp.WaitVisible(chromedp.ID("verify-message")))
	if msg := b.text("verify-message"); !strings.Contains(msg, "insufficient_user_authentication") {
		t.Fatalf("a password sign-in was told %q", msg)
	}
	b.do(chromedp.Click(chromedp.ID("verify-again")), chromedp.WaitVisible(chromedp.ID("passkey")),
		chromedp.Click(chromedp.ID("passkey")))
	b.loginAs("vera", true)
	b.do(chromedp.WaitVisible(chromedp.ID("verify-confirm")), chromedp.Click(chromedp.ID("verify-confirm")),
		chromedp.WaitVisible(chromedp.ID("verify-message")))
	b.waitText("verify-message", "Confirmed. Your agent's next call makes this change; nothing has changed yet.")
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
}

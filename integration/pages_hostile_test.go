package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestReturnToStaysOnBillingdInBrowser: after a genuine sign-in at the
// identity provider, Chromium follows billingd's Location the way it
// follows any: forms of return_to that a browser rewrites into another
// host (a tab or newline removed, a backslash read as a slash) land on
// billingd, never on the other server, which counts every request.
func TestReturnToStaysOnBillingdInBrowser(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("rto", "Return To", "pro")
	h.signInPeople("rto", nil, "rita")
	var phished atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		phished.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>phished</title><p id=phished>phished</p>")
	}))
	t.Cleanup(evil.Close)
	evilHost := strings.TrimPrefix(evil.URL, "http://")
	billingdHost := strings.TrimPrefix(h.url, "http://")
	b := newBrowser(t)

	for _, form := range []string{
		"/\t/" + evilHost + "/phish", // the reported one: /%09/evil.example/phish
		"/\n/" + evilHost + "/phish",
		"/\r\n/" + evilHost + "/phish",
		"/\t\t/" + evilHost + "/phish",
		"\t//" + evilHost + "/phish",
		"/\\" + evilHost + "/phish",
		"/\\\t\\" + evilHost + "/phish",
		"//" + evilHost + "/phish",
	} {
		phished.Store(0)
		b.do(chromedp.Navigate(h.url + "/auth/login?return_to=" + url.QueryEscape(form)))
		b.loginAs("rita", false)
		// The issuer redirects to billingd's callback, which redirects
		// to the return address: wait until the browser has left both.
		b.waitUntil(`(location.host === ` + jsString(billingdHost) + ` && !location.pathname.startsWith("/auth/")` +
			` && document.readyState === "complete") || location.host === ` + jsString(evilHost) +
			` || location.protocol === "chrome-error:"`)
		if at := b.eval(`location.href`); !strings.HasPrefix(at, h.url+"/") || phished.Load() != 0 {
			t.Fatalf("return_to %q took the browser to %s (%d requests to the other server)", form, at, phished.Load())
		}
		if b.eval(`location.pathname`) != "/" {
			t.Fatalf("return_to %q landed on %s, want billingd's /", form, b.eval(`location.href`))
		}
	}
	// A return address of billingd's own is kept.
	b.do(chromedp.Navigate(h.url + "/auth/login?return_to=" + url.QueryEscape("/approvals/cfm_0123456789abcdef")))
	b.loginAs("rita", false)
	b.waitUntil(`location.host === ` + jsString(billingdHost) + ` && !location.pathname.startsWith("/auth/")`)
	if at := b.eval(`location.pathname`); at != "/approvals/cfm_0123456789abcdef" {
		t.Fatalf("a path of billingd's was not kept: at %s", at)
	}
}

// waitUntil evaluates expr until it is true, across the navigations of a
// redirect chain (an evaluation interrupted by one is tried again).
func (b *browser) waitUntil(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			at, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href`))
			b.t.Fatalf("never true: %s (at %s): %v", expr, at, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLogin is GET /auth/login (or another sign-in start) with client as
// X-Forwarded-For (counted only from a proxy in TRUSTED_PROXIES), without
// following the redirect.
func (h *harness) startLogin(path, client string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// storedLogins counts the sign-ins in progress and the bytes of the
// longest return address.
func (h *harness) storedLogins() (rows, longest int) {
	h.t.Helper()
	if err := h.db.Pool.QueryRow(context.Background(),
		`SELECT count(*), coalesce(max(octet_length(return_to)), 0) FROM web_logins`).Scan(&rows, &longest); err != nil {
		h.t.Fatal(err)
	}
	return rows, longest
}

// TestSignInStartsBounded: what an unauthenticated client can make billingd
// store by starting sign-ins is bounded: a return address is kept only up
// to a short length, and sign-in starts (the login route and the
// verification page alike) are limited per client address and in all,
// across replicas (the counts live in the database); over a limit the
// answer is 429 rate_limited with Retry-After and nothing is stored.
func TestSignInStartsBounded(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("RATE_LIMIT_SIGN_INS", "5"), withEnv("RATE_LIMIT_SIGN_INS_TOTAL", "12"),
		withEnv("TRUSTED_PROXIES", "127.0.0.1/32"))
	other := h.replica()
	long := "/" + strings.Repeat("a", 60_000)
	for i := range 5 {
		via := h
		if i%2 == 1 {
			via = other
		}
		path := "/auth/login?return_to=" + url.QueryEscape(long)
		if i == 4 {
			path = "/verify/cfm_0123456789abcdefghijkl"
		}
		if resp := via.startLogin(path, "203.0.113.7"); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in start %d: %d", i, resp.StatusCode)
		}
	}
	if rows, longest := h.storedLogins(); rows != 5 || longest > 512 {
		t.Fatalf("after 5 sign-in starts with a 60 KB return_to: %d rows, longest return_to %d bytes", rows, longest)
	}
	// The sixth from that address, on either replica or the verification
	// page, is refused.
	for _, try := range []struct {
		via  *harness
		path string
	}{{h, "/auth/login?return_to=/"}, {other, "/auth/login"}, {other, "/verify/cfm_0123456789abcdefghijkl"}} {
		resp := try.via.startLogin(try.path, "203.0.113.7")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s over the per-address limit: %d, Retry-After %q", try.path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	// Other addresses go on until the total is reached.
	for i := range 7 {
		if resp := other.startLogin("/auth/login", fmt.Sprintf("198.51.100.%d", i+1)); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("another address %d: %d", i, resp.StatusCode)
		}
	}
	if resp := h.startLogin("/auth/login", "198.51.100.99"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("over the total: %d", resp.StatusCode)
	}
	if rows, _ := h.storedLogins(); rows != 12 {
		t.Fatalf("%d sign-ins stored, want the total of 12", rows)
	}
}

// TestPurgeSignIns: expired sign-ins in progress, expired page sessions
// and counts of sign-in starts no longer read are purged until none is
// left, in their own loop, even when there is no confirmation to purge and
// there are more of them than one batch.
func TestPurgeSignIns(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO web_logins (state_hash, browser_hash, nonce, code_verifier, return_to, created_at, expires_at)
			SELECT sha256(i::text::bytea), sha256(i::text::bytea), 'n', 'v', '/', now() - interval '1 hour', now() - interval '1 minute'
			FROM generate_series(1, 1700) i`,
		`INSERT INTO web_logins (state_hash, browser_hash, nonce, code_verifier, return_to, expires_at)
			VALUES (sha256('live'::bytea), sha256('live'::bytea), 'n', 'v', '/', now() + interval '5 minutes')`,
		`INSERT INTO web_sessions (id_hash, csrf_token, org, subject, client, scopes, expires_at)
			SELECT sha256(i::text::bytea), 'c', 'o', 's', 'c', '{}', now() - interval '1 minute'
			FROM generate_series(1, 1300) i`,
		`INSERT INTO web_sessions (id_hash, csrf_token, org, subject, client, scopes, expires_at)
			VALUES (sha256('live'::bytea), 'c', 'o', 's', 'c', '{}', now() + interval '1 hour')`,
		// Counts of sign-in starts: one of a window two windows ago, and
		// one of the previous window, still read for the sliding estimate.
		`INSERT INTO sign_in_starts (bucket, window_start, window_end, starts) VALUES
			('address 203.0.113.1', now() - interval '3 minutes', now() - interval '2 minutes', 5),
			('address 203.0.113.2', now() - interval '90 seconds', now() - interval '30 seconds', 5)`,
	} {
		if _, err := h.db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.app.PurgeOnce(ctx); n != 0 {
		t.Fatalf("purged %d confirmations, want 0", n)
	}
	var logins, sessions int
	if err := h.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM web_logins), (SELECT count(*) FROM web_sessions)`).
		Scan(&logins, &sessions); err != nil {
		t.Fatal(err)
	}
	if logins != 1 || sessions != 1 {
		t.Fatalf("after one purge: %d sign-ins and %d sessions left, want only the live one of each", logins, sessions)
	}
	var counts []string
	if err := h.db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(bucket), '{}') FROM sign_in_starts`).Scan(&counts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(counts, []string{"address 203.0.113.2"}) {
		t.Fatalf("counts of sign-in starts left after the purge: %v, want only the previous window's", counts)
	}
}

// collectAPIAnswers records "STATUS PATH" of every /api/ and /auth/ answer
// the page receives.
func (b *browser) collectAPIAnswers(h *harness) func() []string {
	answers := chromedp.Events(b.ctx, network.ResponseReceived)
	var mu sync.Mutex
	var seen []string
	go func() {
		for ev, err := range answers {
			if err != nil {
				return
			}
			if u, perr := url.Parse(ev.Response.URL); perr == nil && strings.HasPrefix(ev.Response.URL, h.url+"/") &&
				(strings.HasPrefix(u.Path, "/api/") || strings.HasPrefix(u.Path, "/auth/")) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%d %s", ev.Response.Status, u.Path))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestPagesAskOnlyWhatThePersonMaySee: the dashboard and the approval page
// of a person without billing:admin (signed in with a pasted token, or at
// the identity provider) never call the admin-only audit API, and no call
// they make is refused; an admin's dashboard still shows the audit log.
func TestPagesAskOnlyWhatThePersonMaySee(t *testing.T) {
	h := newHarness(t)
	h.createOrg("see", "See", "pro")
	h.setPolicy("see", agentsNeedApproval)
	h.signInPeople("see", []string{"adele"}, "ursula")
	up := h.proposeApproval(h.user("see", "support-bot"), "scale")

	check := func(who string, answers []string, wantAudit bool) {
		t.Helper()
		sawAudit := false
		for _, a := range answers {
			status, path, _ := strings.Cut(a, " ")
			if path == "/api/billing/audit" {
				sawAudit = true
			}
			if code, _ := strconv.Atoi(status); code >= 400 {
				t.Errorf("%s: the page got %s", who, a)
			}
		}
		if sawAudit != wantAudit {
			t.Errorf("%s: audit API called %v, want %v (answers %q)", who, sawAudit, wantAudit, answers)
		}
	}
	// settle lets a page finish its calls before they are read.
	settle := func() { time.Sleep(700 * time.Millisecond) }

	// A pasted non-admin token: dashboard, then the approval page.
	b := newBrowser(t)
	answers := b.collectAPIAnswers(h)
	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(h.user("see", "ursula"))
	b.waitText("sub-plan", "Pro")
	settle()
	if !b.visible("approvals") && !b.visible("audit") {
		check("pasted user token, dashboard", answers(), false)
	} else {
		t.Error("a non-admin's dashboard shows the approvals or the audit log")
	}
	b.openApproval(h, up.ConfirmationID)
	b.do(chromedp.WaitVisible(chromedp.ID("approval-missing")))
	settle()
	check("pasted user token, dashboard and approval page", answers(), false)

	// A person signed in at the identity provider, without billing:admin.
	b2 := newBrowser(t)
	answers2 := b2.collectAPIAnswers(h)
	b2.do(chromedp.Navigate(h.url + "/auth/login?return_to=/"))
	b2.loginAs("ursula", false)
	b2.do(chromedp.WaitVisible(chromedp.ID("account")))
	b2.waitText("sub-plan", "Pro")
	settle()
	check("signed-in user, dashboard", answers2(), false)

	// An admin (pasted token) sees the audit log and the approvals.
	b3 := newBrowser(t)
	answers3 := b3.collectAPIAnswers(h)
	b3.do(chromedp.Navigate(h.url + "/"))
	b3.signIn(h.admin("see", "adele"))
	b3.do(chromedp.WaitVisible(chromedp.ID("audit")), chromedp.WaitVisible(chromedp.ID("approvals")))
	settle()
	check("admin, dashboard", answers3(), true)
	b.wantNoScriptErrors()
	b2.wantNoScriptErrors()
	b3.wantNoScriptErrors()
}

// visible says whether the element is shown.
func (b *browser) visible(id string) bool {
	return b.eval(`String(!document.getElementById(`+jsString(id)+`).hidden)`) == "true"
}

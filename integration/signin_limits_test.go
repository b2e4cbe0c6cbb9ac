package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"

	"github.com/billingd/billingd/internal/auth"
)

// Issue 28: sign-in that cannot be exhausted. Anyone can start a sign-in,
// so how starts are counted decides whether anyone can stop everyone else
// from signing in (and with it from verifying or approving a change).

// signInStart is a started sign-in as its browser holds it.
type signInStart struct {
	status int
	state  string       // the state sent to the identity provider
	auth   string       // the authorization request's URL
	cookie *http.Cookie // the login cookie binding the sign-in to the browser
}

// beginSignIn is GET path (a sign-in start) with client as X-Forwarded-For
// when set, without following the redirect.
func (h *harness) beginSignIn(path, client string) signInStart {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	resp, err := noRedirects().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	s := signInStart{status: resp.StatusCode, auth: resp.Header.Get("Location")}
	if loc, err := url.Parse(s.auth); err == nil {
		s.state = loc.Query().Get("state")
	}
	for _, c := range resp.Cookies() {
		if c.Name == "billingd_login" {
			s.cookie = &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	if s.status == http.StatusSeeOther && (s.state == "" || s.cookie == nil) {
		h.t.Fatalf("sign-in start %s: no state or no login cookie (%s)", path, s.auth)
	}
	return s
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// callback is GET /auth/callback with query, as a browser holding cookie
// (none when nil) sends it.
func (h *harness) callback(query string, cookie *http.Cookie) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+"/auth/callback?"+query, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := noRedirects().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

var loginFormToken = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// loginAtIssuer signs subject in at the test identity provider for the
// authorization request at authURL, as its login page's form does, and
// returns the query billingd's callback gets (code and state).
func (h *harness) loginAtIssuer(authURL, subject string) string {
	h.t.Helper()
	resp, err := http.Get(authURL)
	if err != nil {
		h.t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := loginFormToken.FindSubmatch(page)
	if m == nil {
		h.t.Fatalf("no login form at %s: %d %.300s", authURL, resp.StatusCode, page)
	}
	resp, err = noRedirects().PostForm(authURL, url.Values{"user": {subject}, "csrf_token": {string(m[1])}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusSeeOther || back.Query().Get("code") == "" {
		h.t.Fatalf("issuer login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	return back.RawQuery
}

// sessionOf is the session cookie a callback's answer set, or nil.
func sessionOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "billingd_session" && c.Value != "" {
			return c
		}
	}
	return nil
}

// wantStarts makes a sign-in start from each client in turn and checks its
// answer: 303 to the identity provider, or 429 with Retry-After.
func (h *harness) wantStarts(path string, want int, clients ...string) {
	h.t.Helper()
	for i, client := range clients {
		s := h.beginSignIn(path, client)
		if s.status != want {
			h.t.Fatalf("start %d of %s from %q: %d, want %d", i+1, path, client, s.status, want)
		}
	}
}

// TestForwardedForOfAnUntrustedPeerIgnored (issue 28, case 3): without
// TRUSTED_PROXIES, X-Forwarded-For names nobody, even from a loopback peer:
// starts with a different forged address each count against the peer
// itself, so one client cannot pose as many and fill the total.
func TestForwardedForOfAnUntrustedPeerIgnored(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("RATE_LIMIT_SIGN_INS", "3"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	h.wantStarts("/auth/login", http.StatusSeeOther, "198.51.100.1", "198.51.100.2", "198.51.100.3")
	h.wantStarts("/auth/login", http.StatusTooManyRequests, "198.51.100.4", "", "2001:db8::1")
}

// TestForwardedForOfATrustedProxy (issue 28, case 3): from a peer in
// TRUSTED_PROXIES, the client is X-Forwarded-For's rightmost hop that is
// not a trusted proxy, whatever the client wrote left of it, and a client
// on a private address is such a hop (it is not trusted for being private).
func TestForwardedForOfATrustedProxy(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("TRUSTED_PROXIES", "127.0.0.1/32"),
		withEnv("RATE_LIMIT_SIGN_INS", "3"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	forged := func(n int) []string {
		var xff []string
		for i := range n {
			xff = append(xff, fmt.Sprintf("203.0.113.%d, 10.0.0.9", i+1))
		}
		return xff
	}
	h.wantStarts("/auth/login", http.StatusSeeOther, forged(3)...)
	h.wantStarts("/auth/login", http.StatusTooManyRequests, forged(2)...)
	h.wantStarts("/auth/login", http.StatusSeeOther, "10.0.0.10", "203.0.113.1, 10.0.0.10")
}

// TestIPv6CountedPer64 (issue 28, case 3): the addresses of one IPv6 /64,
// which one host may all use, are one client; another /64 is another.
func TestIPv6CountedPer64(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("TRUSTED_PROXIES", "127.0.0.1/32"),
		withEnv("RATE_LIMIT_SIGN_INS", "3"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	h.wantStarts("/auth/login", http.StatusSeeOther, "2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:abcd::3")
	h.wantStarts("/auth/login", http.StatusTooManyRequests, "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2::9]")
	h.wantStarts("/auth/login", http.StatusSeeOther, "2001:db8:1:3::1")
}

// TestSignInStartCountedWhenMade (issue 28, case 4): a start counts when it
// is made, whatever becomes of it: 60 starts, each followed by its own
// callback (which uses the sign-in up), get no further than the
// per-address limit of 20.
func TestSignInStartCountedWhenMade(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("RATE_LIMIT_SIGN_INS", "20"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	started := 0
	for range 60 {
		s := h.beginSignIn("/auth/login", "")
		if s.status != http.StatusSeeOther {
			if s.status != http.StatusTooManyRequests {
				t.Fatalf("start: %d", s.status)
			}
			continue
		}
		started++
		h.callback("code=whatever&state="+url.QueryEscape(s.state), s.cookie)
	}
	if rows, _ := h.storedLogins(); started != 20 || rows != 0 {
		t.Fatalf("%d of 60 starts followed by their callbacks were let through (%d still stored), want 20", started, rows)
	}
}

// TestCallbackOfAnotherBrowserLeavesTheSignIn (issue 28, case 4): whoever
// learnt a sign-in's state cannot cancel it: a callback with that state but
// without the browser's login cookie, or with another, leaves the sign-in
// as it was, and its own browser then completes it.
func TestCallbackOfAnotherBrowserLeavesTheSignIn(t *testing.T) {
	h := newHarness(t, withoutTokenPaste())
	h.createOrg("cbk", "Callback", "pro")
	h.signInPeople("cbk", nil, "vera")
	victim := h.beginSignIn("/auth/login?return_to=/dashboard", "")
	if victim.status != http.StatusSeeOther {
		t.Fatalf("start: %d", victim.status)
	}
	attack := "code=whatever&state=" + url.QueryEscape(victim.state)
	for _, cookie := range []*http.Cookie{nil, {Name: "billingd_login", Value: "the-attacker's-own"}} {
		if resp := h.callback(attack, cookie); sessionOf(resp) != nil {
			t.Fatalf("a callback with login cookie %v got a session", cookie)
		}
	}
	if rows, _ := h.storedLogins(); rows != 1 {
		t.Fatalf("after another browser's callbacks: %d sign-ins stored, want the victim's", rows)
	}
	resp := h.callback(h.loginAtIssuer(victim.auth, "vera"), victim.cookie)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard" || sessionOf(resp) == nil {
		t.Fatalf("the victim's own callback: %d %s, session %v", resp.StatusCode, resp.Header.Get("Location"), sessionOf(resp))
	}
}

// TestFloodLeavesVerifyAndApprovalSignIn (issue 28, case 3): a flood of
// anonymous sign-in starts that fills the total (and the person's own
// address) does not stop the person a pending confirmation waits for: a
// sign-in from its verification page or its approval page is counted in
// that confirmation's own budget for the client's address. A flood aimed at
// one confirmation from one address gets no further than that budget, which
// leaves the person's addresses and other confirmations alone; a
// confirmation that waits for nobody has no budget of its own.
func TestFloodLeavesVerifyAndApprovalSignIn(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("TRUSTED_PROXIES", "127.0.0.1/32"),
		withEnv("RATE_LIMIT_SIGN_INS", "2"), withEnv("RATE_LIMIT_SIGN_INS_TOTAL", "6"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	h.createOrg("vfy", "Verify", "pro")
	h.setPolicy("vfy", `{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}`)
	h.signInPeople("vfy", nil, "vera")
	verify := h.proposeVerify(h.user("vfy", "vera"), "upgrade", "scale")
	h.createOrg("apv", "Approve", "pro")
	h.setPolicy("apv", `{"agent_clients":["test-agent"],"approval_window_seconds":600,
		"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
	approval := h.proposeApproval(h.token("apv", "agent-principal", auth.ScopeRead, auth.ScopeWrite), "scale")
	verifyPath := "/verify/" + verify.ConfirmationID
	approvalPath := "/auth/login?return_to=" + url.QueryEscape("/approvals/"+approval.ConfirmationID)

	h.wantStarts("/auth/login", http.StatusSeeOther, "198.51.100.1", "198.51.100.1", "198.51.100.2",
		"198.51.100.2", "198.51.100.3", "198.51.100.3")
	h.wantStarts("/auth/login", http.StatusTooManyRequests, "198.51.100.4", "198.51.100.1")
	h.wantStarts("/verify/cfm_0123456789abcdefghijkl", http.StatusTooManyRequests, "198.51.100.5")

	// The person, from a fresh address or from one the flood used up.
	h.wantStarts(verifyPath, http.StatusSeeOther, "198.51.100.6", "198.51.100.1")
	h.wantStarts(approvalPath, http.StatusSeeOther, "198.51.100.6", "198.51.100.1")
	s := h.beginSignIn(verifyPath, "198.51.100.1")
	resp := h.callback(h.loginAtIssuer(s.auth, "vera"), s.cookie)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != verifyPath || sessionOf(resp) == nil {
		t.Fatalf("the verification sign-in during the flood: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}

	// A flood at the verification page from one address spends that
	// address's budget of the confirmation (10), and only it: the person's
	// addresses, and the approval page, are not held up.
	flood := make([]string, 10)
	for i := range flood {
		flood[i] = "203.0.113.1"
	}
	h.wantStarts(verifyPath, http.StatusSeeOther, flood...)
	h.wantStarts(verifyPath, http.StatusTooManyRequests, "203.0.113.1")
	h.wantStarts(verifyPath, http.StatusSeeOther, "203.0.113.99", "198.51.100.6")
	h.wantStarts(approvalPath, http.StatusSeeOther, "203.0.113.1")
	var counted int
	if err := h.db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(starts), 0) FROM sign_in_starts WHERE bucket = '*'`).
		Scan(&counted); err != nil || counted != 6 {
		t.Fatalf("starts counted in the total: %d (%v), want the flood's 6 only", counted, err)
	}
}

// TestSignInLimitHoldsUnderConcurrency: starts made at once, on two
// replicas, get exactly the limit through: the count is taken under the
// counter's row lock, not read and then written.
func TestSignInLimitHoldsUnderConcurrency(t *testing.T) {
	h := newHarness(t, withoutTokenPaste(), withEnv("RATE_LIMIT_SIGN_INS", "5"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	other := h.replica()
	statuses := make(chan int, 40)
	var wg sync.WaitGroup
	for i := range cap(statuses) {
		via := h
		if i%2 == 1 {
			via = other
		}
		wg.Go(func() {
			resp, err := noRedirects().Get(via.url + "/auth/login")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	started := 0
	for status := range statuses {
		if status == http.StatusSeeOther {
			started++
		}
	}
	if rows, _ := h.storedLogins(); started != 5 || rows != 5 {
		t.Fatalf("40 concurrent starts: %d let through, %d stored; want the limit of 5", started, rows)
	}
}

// TestVerifySignInBudgetIsPerAddress (hostile review of issue 28): the
// agent holds the confirmation's id and verify_url. Ten unauthenticated
// starts of /verify/<id>, from other addresses, once spent the
// confirmation's whole budget and locked the person out; the budget is now
// the confirmation's for each client address, so the person's own start
// goes through, while one address still cannot start without bound.
func TestVerifySignInBudgetIsPerAddress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutTokenPaste(), withEnv("TRUSTED_PROXIES", "127.0.0.1/32"), withEnv("RATE_LIMIT_WINDOW", "1h"))
	h.createOrg("vfy", "Verify", "pro")
	h.setPolicy("vfy", `{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}`)
	verify := h.proposeVerify(h.user("vfy", "vera"), "upgrade", "scale")
	path := "/verify/" + verify.ConfirmationID
	for i := range 10 { // what the agent (or anyone who saw the link) sends
		if s := h.beginSignIn(path, fmt.Sprintf("203.0.113.%d", i+1)); s.status != http.StatusSeeOther {
			t.Fatalf("flood start %d: %d", i+1, s.status)
		}
	}
	if s := h.beginSignIn(path, "198.51.100.77"); s.status != http.StatusSeeOther {
		t.Fatalf("the person's own verification sign-in, from an address the flood never used: %d, want 303", s.status)
	}
	refused := false
	for range 20 {
		if s := h.beginSignIn(path, "203.0.113.1"); s.status == http.StatusTooManyRequests {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("one address started 20 more verification sign-ins: the confirmation's budget per address does not limit")
	}
}

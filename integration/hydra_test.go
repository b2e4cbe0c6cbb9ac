package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/testenv"
)

// These tests sign people in on billingd's pages at a real OpenID provider,
// ORY Hydra v2.3.0 (internal/testenv), whose consent grants only what the
// client requested and its JWT access tokens carry no auth_time or acr:
// the conventions billingd's own dev issuer used to paper over (issue 22).

// hydraSetup is one billingd whose pages sign in at Hydra, with the
// people of one org, and an agent client at Hydra for API tokens.
type hydraSetup struct {
	h     *harness
	hydra *testenv.Hydra
	pages testenv.HydraClient
	agent testenv.HydraClient
	// console is a client the operator lists in PERSON_CLIENTS: only a
	// person may loosen the gate (set the policy).
	console testenv.HydraClient
	org     string
	admin   string // billing:read, write, admin
	person  string // billing:read, write
	other   string // billing:read, write
}

type hydraOptions struct {
	issuer     string // OAUTH_ISSUER; empty: Hydra's own spelling
	secret     string // empty: a public client
	authMethod string
}

var billingScopes = []string{auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin}

func newHydraSetup(t *testing.T, name string, o hydraOptions, opts ...option) *hydraSetup {
	t.Helper()
	hy := testenv.StartHydra(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Hydra's log (shared by the tests):\n%s", hy.Log())
		}
	})
	s := &hydraSetup{hydra: hy, org: name, admin: name + "-wendy", person: name + "-vera", other: name + "-mallory"}
	hy.AddUsers(testenv.HydraUser{Subject: s.admin, Org: name, Scopes: billingScopes},
		testenv.HydraUser{Subject: s.person, Org: name, Scopes: []string{auth.ScopeRead, auth.ScopeWrite}},
		testenv.HydraUser{Subject: s.other, Org: name, Scopes: []string{auth.ScopeRead, auth.ScopeWrite}})
	issuer := o.issuer
	if issuer == "" {
		issuer = hy.Issuer
	}
	pagesID := "billingd-pages-" + name
	consoleID := "console-" + name
	env := []option{withoutTokenPaste(), withEnv("OAUTH_ISSUER", issuer),
		withEnv("OIDC_CLIENT_ID", pagesID), withEnv("PERSON_CLIENTS", personClient+","+consoleID)}
	if o.secret != "" {
		env = append(env, withEnv("OIDC_CLIENT_SECRET", o.secret))
	}
	s.h = newHarness(t, append(env, opts...)...)
	scopes := append([]string{"openid", "profile"}, billingScopes...)
	s.pages = testenv.HydraClient{ID: pagesID, Secret: o.secret, AuthMethod: o.authMethod,
		RedirectURIs: []string{s.h.url + "/auth/callback"}, Audience: []string{s.h.url}, Scopes: scopes}
	hy.CreateClient(t, s.pages)
	s.agent = testenv.HydraClient{ID: "agent-" + name, RedirectURIs: []string{"http://127.0.0.1:9/callback"},
		Audience: []string{s.h.url}, Scopes: scopes}
	hy.CreateClient(t, s.agent)
	s.console = testenv.HydraClient{ID: consoleID, RedirectURIs: []string{"http://127.0.0.1:9/callback"},
		Audience: []string{s.h.url}, Scopes: scopes}
	hy.CreateClient(t, s.console)
	s.h.createOrg(name, "Hydra "+name, "pro")
	return s
}

// personToken is an access token Hydra issued to the console, a person's
// client, for subject.
func (s *hydraSetup) personToken(subject string, scopes ...string) string {
	s.h.t.Helper()
	return s.hydra.AccessToken(s.h.t, s.console, subject, s.h.url, append([]string{"openid"}, scopes...)...)
}

// token is an access token Hydra issued to the agent client for subject.
func (s *hydraSetup) token(subject string, scopes ...string) string {
	s.h.t.Helper()
	return s.hydra.AccessToken(s.h.t, s.agent, subject, s.h.url, append([]string{"openid"}, scopes...)...)
}

// visitor is a browser without one: an HTTP client with a cookie jar that
// follows redirects.
type visitor struct {
	t      *testing.T
	client *http.Client
}

func newVisitor(t *testing.T) *visitor {
	jar, _ := cookiejar.New(nil)
	return &visitor{t: t, client: &http.Client{Jar: jar}}
}

// page is a page the visitor ended on.
type page struct {
	url    *url.URL
	status int
	body   string
}

func (v *visitor) get(u string) page {
	v.t.Helper()
	resp, err := v.client.Get(u)
	return v.read(resp, err)
}

func (v *visitor) post(u string, form url.Values) page {
	v.t.Helper()
	resp, err := v.client.PostForm(u, form)
	return v.read(resp, err)
}

func (v *visitor) read(resp *http.Response, err error) page {
	v.t.Helper()
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return page{url: resp.Request.URL, status: resp.StatusCode, body: string(b)}
}

// signIn follows a sign-in that starts at start to the test login app's
// page, and signs in there as subject. fresh says whether Hydra must have
// been asked to authenticate the person again (max_age=0, prompt=login),
// which the login page shows.
func (v *visitor) signIn(start, subject string, fresh bool) page {
	v.t.Helper()
	login := v.get(start)
	if !strings.Contains(login.body, `id="user-`+subject+`"`) {
		v.t.Fatalf("no login page offering %s at %s (%d): %.400s", subject, login.url, login.status, login.body)
	}
	if got := strings.Contains(login.body, `id="fresh"`); got != fresh {
		v.t.Fatalf("login page asks for a fresh authentication: %v, want %v", got, fresh)
	}
	return v.post(login.url.String(), url.Values{"user": {subject}})
}

// api calls billingd's API with the session cookie.
func (v *visitor) api(h *harness, path string) response {
	v.t.Helper()
	resp, err := v.client.Get(h.url + path)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Body: b, Header: resp.Header}
}

// TestHydraPageSignIn: the pages' sign-in completes at Hydra for a public
// client and for confidential ones (client_secret_basic and _post, secrets
// with / + =), with OAUTH_ISSUER spelled as Hydra spells it and without the
// trailing slash. The session may do what Hydra granted: an admin reads
// the audit log; a person granted read and write only gets 403 there but
// reads the subscription. The protected resource metadata names Hydra's
// issuer as Hydra spells it.
func TestHydraPageSignIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		o    func(*testenv.Hydra) hydraOptions
	}{
		{"hypub", func(hy *testenv.Hydra) hydraOptions { return hydraOptions{} }},
		{"hybasic", func(hy *testenv.Hydra) hydraOptions {
			return hydraOptions{issuer: strings.TrimSuffix(hy.Issuer, "/"), secret: "s3cret/with+plus=and/slash"}
		}},
		{"hypost", func(hy *testenv.Hydra) hydraOptions {
			return hydraOptions{secret: "an0ther/s3cret+=", authMethod: "client_secret_post"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newHydraSetup(t, tc.name, tc.o(testenv.StartHydra(t)))
			h := s.h

			admin := newVisitor(t)
			if p := admin.signIn(h.url+"/auth/login?return_to=/", s.admin, false); p.status != http.StatusOK || p.url.String() != h.url+"/" {
				t.Fatalf("sign-in ended at %s (%d): %.300s", p.url, p.status, p.body)
			}
			var info struct {
				SignedIn bool   `json:"signed_in"`
				Subject  string `json:"subject"`
				Org      string `json:"org"`
			}
			r := admin.api(h, "/auth/session")
			if err := json.Unmarshal(r.Body, &info); err != nil || !info.SignedIn || info.Subject != s.admin || info.Org != s.org {
				t.Fatalf("session %s: %v", r.Body, err)
			}
			wantStatus(t, admin.api(h, "/api/billing/subscription"), http.StatusOK, "")
			wantStatus(t, admin.api(h, "/api/billing/audit"), http.StatusOK, "")

			person := newVisitor(t)
			person.signIn(h.url+"/auth/login?return_to=/", s.person, false)
			wantStatus(t, person.api(h, "/api/billing/subscription"), http.StatusOK, "")
			wantStatus(t, person.api(h, "/api/billing/audit"), http.StatusForbidden, "insufficient_scope")

			var prm struct {
				AuthorizationServers []string `json:"authorization_servers"`
			}
			h.do("GET", "/.well-known/oauth-protected-resource", "", nil).decode(t, &prm)
			if len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != s.hydra.Issuer {
				t.Errorf("authorization_servers %q, want Hydra's %q", prm.AuthorizationServers, s.hydra.Issuer)
			}
			// Hydra's access tokens are accepted as bearer tokens too.
			wantStatus(t, h.do("GET", "/api/billing/subscription", s.token(s.person, auth.ScopeRead), nil), http.StatusOK, "")
		})
	}
}

// TestHydraVerifyPage: the verify level end to end with Hydra. The agent's
// Hydra token carries no auth_time, so step-up cannot satisfy verify (401
// insufficient_user_authentication); the verification page can: it makes
// Hydra authenticate the person again although Hydra remembers them,
// refuses someone else, and once the requester confirms there, the
// agent's own second call executes.
func TestHydraVerifyPage(t *testing.T) {
	t.Parallel()
	s := newHydraSetup(t, "hyverify", hydraOptions{issuer: strings.TrimSuffix(testenv.StartHydra(t).Issuer, "/")})
	h := s.h
	wantStatus(t, h.do("PUT", "/api/billing/policy", s.personToken(s.admin, billingScopes...),
		`{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}`), http.StatusOK, "")
	agent := s.token(s.person, auth.ScopeRead, auth.ScopeWrite)
	p := h.proposeVerify(agent, "upgrade", "scale")
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusUnauthorized, "insufficient_user_authentication")

	// Someone else of the org opens the link and is refused.
	other := newVisitor(t)
	refused := other.signIn(p.VerifyURL, s.other, true)
	if !strings.Contains(refused.body, "only the person who asked") || strings.Contains(refused.body, p.Summary) {
		t.Fatalf("another person was shown: %.600s", refused.body)
	}

	// The requester, already signed in at Hydra (the dashboard), must
	// still authenticate again.
	person := newVisitor(t)
	person.signIn(h.url+"/auth/login?return_to=/", s.person, false)
	verify := person.signIn(p.VerifyURL, s.person, true)
	if !strings.Contains(verify.body, `id="verify-confirm"`) || !strings.Contains(verify.body, p.Summary) {
		t.Fatalf("verification page: %.600s", verify.body)
	}
	csrf := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(verify.body)
	if csrf == nil {
		t.Fatal("no CSRF token on the page")
	}
	done := person.post(verify.url.String(), url.Values{"decision": {"confirm"}, "csrf_token": {csrf[1]}})
	if !strings.Contains(done.body, "Confirmed.") {
		t.Fatalf("after Confirm: %.600s", done.body)
	}
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	var audit struct{ Events []billing.AuditEvent }
	h.do("GET", "/api/billing/audit?limit=500", s.token(s.admin, billingScopes...), nil).decode(t, &audit)
	names := strings.Join(eventNames(audit.Events), " ")
	if !strings.Contains(names, "USER_VERIFIED:page") || !strings.Contains(names, "OPERATION_EXECUTED") {
		t.Fatalf("audit: %s", names)
	}
}

// TestHydraDashboardInBrowser: in Chromium, a person signs in on the
// dashboard at Hydra, changes the plan through the confirmation dialog (a
// state change with the session's CSRF token), and signs out.
func TestHydraDashboardInBrowser(t *testing.T) {
	t.Parallel()
	s := newHydraSetup(t, "hydash", hydraOptions{secret: "d4shboard/secret+="})
	h := s.h
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.do(chromedp.WaitVisible(chromedp.ID("oidc-sign-in")), chromedp.Click(chromedp.ID("oidc-sign-in")))
	b.loginAs(s.admin, false)
	b.do(chromedp.WaitVisible(chromedp.ID("account")))
	b.waitText("sub-plan", "Pro")
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:scale"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")), chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("sub-plan", "Scale")
	b.waitText("status", "Done: the plan is now Scale.")
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	b.screenshot(filepath.Join(screenshotDir(t), "hydra-dashboard.png"))
	if body := b.text("account"); !strings.Contains(body, "Audit log") || !strings.Contains(body, "OPERATION_EXECUTED") {
		t.Errorf("the admin's dashboard lacks the audit log:\n%s", body)
	}
	signedIn := b.sessionCookie(h)
	b.do(chromedp.Click(chromedp.ID("sign-out")), chromedp.WaitVisible(chromedp.ID("oidc-sign-in")))
	if r := h.withCookie(signedIn, "GET", "/auth/session", nil); strings.Contains(string(r.Body), `"signed_in":true`) {
		t.Fatalf("session after sign-out: %s", r.Body)
	}
	b.wantNoScriptErrors()
}

// TestHydraIssuerMismatchStopsServe: an OAUTH_ISSUER that Hydra's metadata
// contradicts (here the same server written as localhost) stops billingd
// at start with a message naming OAUTH_ISSUER and Hydra's issuer, rather
// than starting and refusing every token.
func TestHydraIssuerMismatchStopsServe(t *testing.T) {
	t.Parallel()
	hy := testenv.StartHydra(t)
	db := testenv.NewDatabase(t)
	wrong := strings.Replace(hy.Issuer, "127.0.0.1", "localhost", 1)
	env := map[string]string{"DATABASE_URL": db.URL, "STRIPE_SECRET_KEY": "sk_test_billingd", "OAUTH_ISSUER": wrong,
		"OIDC_CLIENT_ID": "billingd-pages", "MIGRATE_ON_START": "false", "METRICS_ADDR": "off"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{})
	if err == nil {
		a.Close()
		t.Fatal("billingd started with an issuer Hydra's metadata contradicts")
	}
	if msg := err.Error(); !strings.Contains(msg, "OAUTH_ISSUER") || !strings.Contains(msg, hy.Issuer) {
		t.Fatalf("the error does not name OAUTH_ISSUER and Hydra's issuer: %v", err)
	}
	t.Log(err)
}

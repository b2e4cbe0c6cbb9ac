package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// HydraVersion is the ORY Hydra that make tools builds into .tools/.
const HydraVersion = "v2.3.0"

// Hydra is a real OpenID provider for tests: ORY Hydra (OpenID Certified),
// run in memory on loopback ports, with a small login and consent app of
// its own that does what Hydra's reference app does: the person picks who
// they are on a login page (no password), and consent grants the scopes
// and audience the client requested, of those the person may have, never
// more. One Hydra serves the whole test process; tests keep apart by
// registering clients and people of their own.
type Hydra struct {
	// Issuer is Hydra's issuer, spelled as Hydra spells it: with a
	// trailing slash.
	Issuer string
	admin  string
	app    *hydraLoginApp
	logs   *hydraLog
}

// HydraUser is a person the login page offers.
type HydraUser struct {
	Subject string
	Org     string   // put in access tokens as org_id
	Scopes  []string // the billing scopes consent may grant this person
}

// HydraClient is an OAuth client registered at Hydra.
type HydraClient struct {
	ID     string
	Secret string // empty: a public client (token_endpoint_auth_method none)
	// AuthMethod is client_secret_basic (default with a secret) or
	// client_secret_post.
	AuthMethod   string
	RedirectURIs []string
	Audience     []string // the audiences the client may ask for
	Scopes       []string // the scopes the client may ask for
}

// The acr values the login page sets.
const (
	HydraPasswordACR = "urn:billingd:test:password"
	HydraPasskeyACR  = "urn:billingd:test:passkey"
)

var hydra struct {
	once sync.Once
	h    *Hydra
	err  error
}

// StartHydra returns the test process's Hydra, starting it on first use
// from the binary make tools builds (BILLINGD_TEST_HYDRA, else
// .tools/hydra@v2.3.0/hydra in the module, else hydra on PATH). Without
// one the test skips, or fails when CI=true.
func StartHydra(t testing.TB) *Hydra {
	t.Helper()
	hydra.once.Do(func() {
		bin, err := findHydra()
		if err != nil {
			hydra.err = err
			return
		}
		hydra.h, hydra.err = startHydra(bin)
	})
	if hydra.err != nil {
		missing(t, "no ORY Hydra %s (make tools builds it into .tools/): %v", HydraVersion, hydra.err)
	}
	return hydra.h
}

func findHydra() (string, error) {
	if p := os.Getenv("BILLINGD_TEST_HYDRA"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("BILLINGD_TEST_HYDRA: %w", err)
		}
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, ".tools", "hydra@"+HydraVersion, "hydra")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
				break
			}
		}
	}
	if p, err := exec.LookPath("hydra"); err == nil {
		return p, nil
	}
	return "", errors.New("hydra binary not found in .tools/ or on PATH")
}

// startHydra runs `hydra serve all --dev` in memory: public and admin API
// on loopback ports, JWT access tokens carrying org_id at the top level,
// telemetry off. Its environment holds only its configuration, with every
// proxy pointed at a closed loopback port so that nothing it might send
// (telemetry is off, but Hydra still queues a startup report) leaves the
// machine.
func startHydra(bin string) (*Hydra, error) {
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	public, admin, closed := ports[0], ports[1], ports[2]
	// Everyone reaches Hydra through one serializing proxy (see
	// hydraSerializer); Hydra's own issuer and URLs are the proxy's.
	publicProxy, adminProxy, serializer := listenLoopback(), listenLoopback(), &hydraSerializer{}
	if publicProxy == nil || adminProxy == nil {
		return nil, errors.New("no loopback port for Hydra's proxy")
	}
	go func() { _ = http.Serve(publicProxy, serializer.to(fmt.Sprintf("http://127.0.0.1:%d", public))) }()
	go func() { _ = http.Serve(adminProxy, serializer.to(fmt.Sprintf("http://127.0.0.1:%d", admin))) }()
	h := &Hydra{Issuer: "http://" + publicProxy.Addr().String() + "/", admin: "http://" + adminProxy.Addr().String()}
	h.app = &hydraLoginApp{admin: h.admin, users: map[string]HydraUser{}}
	// Lives as long as the test process, like Hydra.
	app := httptest.NewServer(h.app.handler())
	noProxy := fmt.Sprintf("http://127.0.0.1:%d", closed)
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"DSN=memory", "LOG_LEVEL=info", "SQA_OPT_OUT=true",
		"HTTP_PROXY=" + noProxy, "HTTPS_PROXY=" + noProxy, "http_proxy=" + noProxy, "https_proxy=" + noProxy,
		"NO_PROXY=", "no_proxy=",
		"SERVE_PUBLIC_HOST=127.0.0.1", fmt.Sprintf("SERVE_PUBLIC_PORT=%d", public),
		"SERVE_ADMIN_HOST=127.0.0.1", fmt.Sprintf("SERVE_ADMIN_PORT=%d", admin),
		"URLS_SELF_ISSUER=" + h.Issuer,
		"URLS_LOGIN=" + app.URL + "/login", "URLS_CONSENT=" + app.URL + "/consent", "URLS_ERROR=" + app.URL + "/error",
		`SECRETS_SYSTEM=["billingd-tests-hydra-system-secret"]`,
		"STRATEGIES_ACCESS_TOKEN=jwt",
		`OAUTH2_ALLOWED_TOP_LEVEL_CLAIMS=["org_id"]`, "OAUTH2_MIRROR_TOP_LEVEL_CLAIMS=false",
	}
	logs := &hydraLog{}
	h.logs = logs
	cmd.Stdout, cmd.Stderr = logs, logs
	// Dies with the test process, so no run leaves a stray server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		app.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health/ready", admin))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h, h.warmUp()
			}
		}
		select {
		case <-exited:
			app.Close()
			return nil, fmt.Errorf("hydra exited: %s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			app.Close()
			return nil, fmt.Errorf("hydra not ready within 60s: %s", logs.String())
		}
	}
}

// warmUp has Hydra make its signing keys (RSA 4096, made on first use) for
// ID tokens and JWT access tokens, once, before any test asks: made on
// demand by concurrent tests on a busy machine, they took longer than a
// relying party waits for a JWKS. The public listener may come up a moment
// after the admin one answers ready, so the first answers may be the
// proxy's 502: it asks again.
func (h *Hydra) warmUp() error {
	client := &http.Client{Timeout: 3 * time.Minute}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := h.jwksKeys(client)
		if err == nil && n >= 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hydra's JWKS: %d keys, %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *Hydra) jwksKeys(client *http.Client) (int, error) {
	resp, err := client.Get(h.Issuer + ".well-known/jwks.json")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	err = json.NewDecoder(resp.Body).Decode(&set)
	return len(set.Keys), err
}

// hydraLog keeps the end of Hydra's log, for failure messages.
type hydraLog struct {
	mu  sync.Mutex
	buf []byte
}

const hydraLogKeep = 16 << 10

func (l *hydraLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > hydraLogKeep {
		l.buf = l.buf[len(l.buf)-hydraLogKeep:]
	}
	return len(p), nil
}

func (l *hydraLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// Log is the end of Hydra's log.
func (h *Hydra) Log() string { return h.logs.String() }

// hydraSerializer lets one request at a time reach Hydra. DSN=memory is
// SQLite with a shared cache over a pool of connections, and concurrent
// sign-ins of parallel tests failed now and then on its table locks (Hydra
// answers "The error is unrecognizable"); one connection (max_conns=1)
// deadlocks Hydra. A sign-in is a handful of short requests, so tests in
// parallel barely wait.
type hydraSerializer struct{ mu sync.Mutex }

func (s *hydraSerializer) to(target string) http.Handler {
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})
}

func listenLoopback() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	return ln
}

// AddUsers puts people on the login page.
func (h *Hydra) AddUsers(users ...HydraUser) {
	h.app.mu.Lock()
	defer h.app.mu.Unlock()
	for _, u := range users {
		h.app.users[u.Subject] = u
	}
}

// CreateClient registers c (authorization code grant) through the admin
// API.
func (h *Hydra) CreateClient(t testing.TB, c HydraClient) {
	t.Helper()
	method := "none"
	if c.Secret != "" {
		method = or(c.AuthMethod, "client_secret_basic")
	}
	body := map[string]any{"client_id": c.ID, "client_name": c.ID, "grant_types": []string{"authorization_code"},
		"response_types": []string{"code"}, "redirect_uris": c.RedirectURIs, "audience": c.Audience,
		"scope": strings.Join(c.Scopes, " "), "token_endpoint_auth_method": method}
	if c.Secret != "" {
		body["client_secret"] = c.Secret
	}
	if err := h.app.call(http.MethodPost, h.admin+"/admin/clients", body, nil); err != nil {
		t.Fatalf("register client %s at Hydra: %v", c.ID, err)
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// AccessToken is what a client of the person's (an agent) holds: an access
// token from the authorization code flow (PKCE) as subject, asking for
// audience with Hydra's audience parameter. The client's redirect URI need
// not answer: the flow stops there.
func (h *Hydra) AccessToken(t testing.TB, c HydraClient, subject, audience string, scopes ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := oauth2.Config{ClientID: c.ID, ClientSecret: c.Secret, RedirectURL: c.RedirectURIs[0], Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: h.Issuer + "oauth2/auth", TokenURL: h.Issuer + "oauth2/token"}}
	verifier, state := oauth2.GenerateVerifier(), "state-"+oauth2.GenerateVerifier()
	jar, _ := cookiejar.New(nil)
	var callback *url.URL
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), c.RedirectURIs[0]) {
			callback = r.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	page, err := client.Get(cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("audience", audience)))
	if err == nil && callback == nil {
		page.Body.Close()
		var resp *http.Response
		resp, err = client.PostForm(page.Request.URL.String(), url.Values{"user": {subject}})
		if err == nil {
			resp.Body.Close()
		}
	}
	if err != nil || callback == nil || callback.Query().Get("state") != state || callback.Query().Get("code") == "" {
		t.Fatalf("Hydra authorization for %s: %v (callback %v); Hydra's log:\n%s", subject, err, callback, h.logs)
	}
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, client), callback.Query().Get("code"),
		oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("Hydra token for %s: %v; Hydra's log:\n%s", subject, err, h.logs)
	}
	return tok.AccessToken
}

// hydraLoginApp is the login and consent app Hydra sends the browser to.
type hydraLoginApp struct {
	admin string
	mu    sync.Mutex
	users map[string]HydraUser
}

func (a *hydraLoginApp) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", a.loginPage)
	mux.HandleFunc("POST /login", a.login)
	mux.HandleFunc("GET /consent", a.consent)
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Hydra error: "+r.URL.Query().Get("error")+": "+r.URL.Query().Get("error_description"), http.StatusBadRequest)
	})
	return mux
}

// call sends a JSON request to Hydra's admin API and decodes the answer
// into out (when not nil).
func (a *hydraLoginApp) call(method, u string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// hydraRequest is the part of a login or consent request the app reads.
type hydraRequest struct {
	Skip              bool     `json:"skip"`
	Subject           string   `json:"subject"`
	RequestURL        string   `json:"request_url"`
	RequestedScope    []string `json:"requested_scope"`
	RequestedAudience []string `json:"requested_access_token_audience"`
}

type hydraRedirect struct {
	RedirectTo string `json:"redirect_to"`
}

func (a *hydraLoginApp) loginRequest(challenge string) (hydraRequest, error) {
	var req hydraRequest
	err := a.call(http.MethodGet, a.admin+"/admin/oauth2/auth/requests/login?login_challenge="+url.QueryEscape(challenge), nil, &req)
	return req, err
}

// loginPage shows the people to sign in as, unless Hydra already knows who
// is there and was not asked to authenticate them again (skip).
func (a *hydraLoginApp) loginPage(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("login_challenge")
	req, err := a.loginRequest(challenge)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if req.Skip {
		a.acceptLogin(w, r, challenge, req.Subject, "")
		return
	}
	fresh := false
	if u, err := url.Parse(req.RequestURL); err == nil {
		fresh = u.Query().Get("prompt") == "login" || u.Query().Get("max_age") == "0"
	}
	a.mu.Lock()
	var users []string
	for s := range a.users {
		users = append(users, s)
	}
	a.mu.Unlock()
	slices.Sort(users)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = hydraLoginPage.Execute(w, struct {
		Challenge string
		Users     []string
		Fresh     bool
	}{challenge, users, fresh})
}

func (a *hydraLoginApp) login(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("login_challenge")
	if c := r.PostFormValue("login_challenge"); c != "" {
		challenge = c
	}
	acr := HydraPasswordACR
	if r.PostFormValue("passkey") == "on" {
		acr = HydraPasskeyACR
	}
	a.acceptLogin(w, r, challenge, r.PostFormValue("user"), acr)
}

func (a *hydraLoginApp) acceptLogin(w http.ResponseWriter, r *http.Request, challenge, subject, acr string) {
	a.mu.Lock()
	_, known := a.users[subject]
	a.mu.Unlock()
	if !known {
		http.Error(w, "unknown person", http.StatusBadRequest)
		return
	}
	body := map[string]any{"subject": subject, "remember": true, "remember_for": 3600}
	if acr != "" {
		body["acr"] = acr
	}
	var next hydraRedirect
	if err := a.call(http.MethodPut, a.admin+"/admin/oauth2/auth/requests/login/accept?login_challenge="+
		url.QueryEscape(challenge), body, &next); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusSeeOther)
}

// consent grants what the client requested of what the person may have:
// openid and profile, and their billing scopes; the audience requested; the
// person's org in the access token.
func (a *hydraLoginApp) consent(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("consent_challenge")
	var req hydraRequest
	if err := a.call(http.MethodGet, a.admin+"/admin/oauth2/auth/requests/consent?consent_challenge="+
		url.QueryEscape(challenge), nil, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	a.mu.Lock()
	user := a.users[req.Subject]
	a.mu.Unlock()
	may := append([]string{"openid", "profile"}, user.Scopes...)
	grant := []string{}
	for _, s := range req.RequestedScope {
		if slices.Contains(may, s) {
			grant = append(grant, s)
		}
	}
	body := map[string]any{"grant_scope": grant, "grant_access_token_audience": req.RequestedAudience,
		"remember": false, "session": map[string]any{"access_token": map[string]any{"org_id": user.Org}}}
	var next hydraRedirect
	if err := a.call(http.MethodPut, a.admin+"/admin/oauth2/auth/requests/consent/accept?consent_challenge="+
		url.QueryEscape(challenge), body, &next); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, next.RedirectTo, http.StatusFound)
}

// hydraLoginPage has the element ids of the dev issuer's login page
// (user-<subject>, passkey, fresh), so browser tests drive either.
var hydraLoginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test sign-in (ORY Hydra)</title></head>
<body><h1>Sign in (ORY Hydra test login app)</h1>
{{if .Fresh}}<p id="fresh">The application asked you to authenticate again.</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="login_challenge" value="{{.Challenge}}">
<p><label><input type="checkbox" name="passkey" id="passkey"> Use a passkey</label></p>
{{range .Users}}<button type="submit" name="user" value="{{.}}" id="user-{{.}}">{{.}}</button>
{{end}}</form></body></html>
`))

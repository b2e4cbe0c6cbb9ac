package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devenv"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/internal/testenv"
)

// harness is one billingd with its own database, token issuer and Stripe
// stand-in, served on a loopback port.
type harness struct {
	t      *testing.T
	db     *testenv.Database
	issuer *devissuer.Issuer
	app    *app.App
	url    string
	// metricsURL is the base URL of the metrics listener (METRICS_ADDR).
	metricsURL string
	env        map[string]string
	fake       *stripepaytest.Server // nil when running against stripe-mock (withStripeMock)
	// offSpecRequests: the requests are deliberately outside the OpenAPI
	// description; only the answers are validated (see offSpec).
	offSpecRequests bool
	// tokenPaste: the pages offer the pasted-token sign-in (billingd dev's);
	// most browser tests sign in that way.
	tokenPaste bool
	// pg is the harness's own PostgreSQL cluster (withPrivatePostgres), nil
	// on the shared server.
	pg *devenv.Postgres
}

type harnessOptions struct {
	stripeMock   bool
	poolMaxConns int
	env          map[string]string
	noPaste      bool
	privatePG    bool
}

// withPrivatePostgres runs the harness on a PostgreSQL cluster of its own,
// which the test may restart (harness.pg).
func withPrivatePostgres() option { return func(o *harnessOptions) { o.privatePG = true } }

// withoutTokenPaste serves the pages as billingd serve does: sign-in at
// the identity provider only, no pasted tokens.
func withoutTokenPaste() option { return func(o *harnessOptions) { o.noPaste = true } }

type option func(*harnessOptions)

// withStripeMock runs against stripe-mock, which checks the wire format of
// every request but keeps no state, instead of the Stripe fake
// (internal/stripepay/stripepaytest, which keeps state, honours idempotency
// keys and injects faults). Second calls need the fake: billingd checks the
// subscription at Stripe before a change, and stripe-mock's is a fixture.
func withStripeMock() option { return func(o *harnessOptions) { o.stripeMock = true } }

// withPoolMaxConns caps billingd's database pool (pgx's pool_max_conns).
func withPoolMaxConns(n int) option { return func(o *harnessOptions) { o.poolMaxConns = n } }

// withEnv sets a configuration variable.
func withEnv(name, value string) option { return func(o *harnessOptions) { o.env[name] = value } }

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	o := harnessOptions{env: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	h := &harness{t: t, tokenPaste: !o.noPaste}
	if o.privatePG {
		h.db, h.pg = testenv.PrivateDatabase(t)
	} else {
		h.db = testenv.NewDatabase(t)
	}
	h.issuer = startIssuer(t)
	stripeURL := h.stripeBase(!o.stripeMock)
	ln := listen(t)
	h.url = "http://" + ln.Addr().String()
	h.env = map[string]string{
		"DATABASE_URL": h.db.URL, "STRIPE_SECRET_KEY": "sk_test_billingd", "STRIPE_API_BASE": stripeURL,
		"OAUTH_ISSUER": h.issuer.IssuerURL(), "PUBLIC_BASE_URL": h.url, "LISTEN_ADDR": ln.Addr().String(),
		"OIDC_CLIENT_ID": testClientID,
		// test-console plays the operator's own dashboard: its calls are
		// a person's (admin). Every other client is an agent's (§4).
		"PERSON_CLIENTS":   personClient,
		"MIGRATE_ON_START": "false", "STRIPE_TIMEOUT": "5s",
		// Fault tests see each of Stripe's answers once, as billingd does
		// once stripe-go's retries are spent; TestStripeLockTimeoutRetried
		// turns them on.
		"STRIPE_MAX_NETWORK_RETRIES": "0",
		// A billingd serve started from this environment (startServe) takes
		// any free metrics port: tests and worktrees run side by side.
		"METRICS_ADDR": "127.0.0.1:0",
		// Tests that exercise rate limits turn them on; the others make
		// more calls per principal than a human would.
		"RATE_LIMIT_PROPOSALS": "0", "RATE_LIMIT_FAILED_CONFIRMS": "0",
	}
	if o.poolMaxConns > 0 {
		h.env["DATABASE_URL"] += "&pool_max_conns=" + strconv.Itoa(o.poolMaxConns)
	}
	for k, v := range o.env {
		h.env[k] = v
	}
	h.app, h.metricsURL = h.serve(ln)
	return h
}

// replica starts another billingd on the same database, issuer and Stripe,
// as a second replica behind the same public URL.
func (h *harness) replica() *harness {
	h.t.Helper()
	r := *h
	ln := listen(h.t)
	r.url = "http://" + ln.Addr().String()
	r.app, r.metricsURL = r.serve(ln)
	return &r
}

// serve builds billingd from h.env and serves it on ln, with the server
// billingd serve uses (app.HTTPServer), and its metrics on a listener of
// their own, whose URL it returns.
func (h *harness) serve(ln net.Listener) (*app.App, string) {
	h.t.Helper()
	cfg, err := config.Load(func(k string) string { return h.env[k] })
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.DevTokenPaste = h.tokenPaste
	a, err := app.New(context.Background(), cfg, app.Options{LogOutput: testLogWriter{h.t}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(a.Close)
	// Like serve, every replica settles unknown Stripe outcomes.
	ctx, cancel := context.WithCancel(context.Background())
	settled := make(chan struct{})
	go func() { defer close(settled); a.RunSettle(ctx) }()
	h.t.Cleanup(func() { cancel(); <-settled })
	srv := &httptest.Server{Listener: ln, Config: app.HTTPServer(cfg, a.Handler)}
	srv.Start()
	h.t.Cleanup(srv.Close)
	metrics := &httptest.Server{Listener: listen(h.t), Config: app.HTTPServer(cfg, a.MetricsHandler)}
	metrics.Start()
	h.t.Cleanup(metrics.Close)
	return a, metrics.URL
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// personClient is the harness's person-facing client (PERSON_CLIENTS): the
// operator's own console, through which admin tokens act.
const personClient = "test-console"

// testClientID is the harness's OIDC client for the pages' sign-in.
const testClientID = "billingd-test-pages"

func startIssuer(t *testing.T) *devissuer.Issuer {
	t.Helper()
	iss, err := devissuer.New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(iss.Handler())
	t.Cleanup(srv.Close)
	iss.SetIssuerURL(srv.URL)
	return iss
}

// stripeBase starts the fake (with the default catalog's prices) or returns
// stripe-mock's URL.
func (h *harness) stripeBase(fake bool) string {
	if !fake {
		return testenv.StripeMock(h.t)
	}
	var url string
	h.fake, url = startFakeStripe(h.t)
	return url
}

// startFakeStripe serves the Stripe fake with the default catalog's prices
// until t ends.
func startFakeStripe(t *testing.T) (*stripepaytest.Server, string) {
	fake := stripepaytest.New()
	for _, p := range billing.DefaultPlans() {
		fake.SetPrice(p.StripePriceID, p.AmountCents, p.Currency)
	}
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

// testLogWriter sends billingd's logs to the test log, shown on failure.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// createOrg creates an org through the service, as billingd org create does.
func (h *harness) createOrg(id, name, plan string) billing.Account {
	h.t.Helper()
	acct, err := h.app.Service.CreateOrg(context.Background(), id, name, "billing@"+id+".example", plan)
	if err != nil {
		h.t.Fatalf("create org %s: %v", id, err)
	}
	return acct
}

// token mints an access token for principal in org with the given scopes,
// as the client test-agent: an agent, as every client not in
// PERSON_CLIENTS is.
func (h *harness) token(org, principal string, scopes ...string) string {
	h.t.Helper()
	return h.tokenOf("test-agent", org, principal, scopes...)
}

// tokenOf mints an access token of client for principal in org.
func (h *harness) tokenOf(client, org, principal string, scopes ...string) string {
	h.t.Helper()
	tok, err := h.issuer.Mint(devissuer.Claims{
		Subject: principal, Org: org, Client: client, Scopes: scopes, Audience: []string{h.env["PUBLIC_BASE_URL"]},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// user is a principal with every scope but admin.
func (h *harness) user(org, principal string) string {
	return h.token(org, principal, auth.ScopeRead, auth.ScopeWrite)
}

// admin is a person with every scope, through the client test-console, which
// the harness lists in PERSON_CLIENTS: a person's call, so it may approve
// other people's changes.
func (h *harness) admin(org, principal string) string {
	return h.tokenOf(personClient, org, principal, auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin)
}

// response is an HTTP answer with its body read.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := r.decodeErr(v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// decodeErr is decode for goroutines other than the test's own.
func (r response) decodeErr(v any) error { return json.Unmarshal(r.Body, v) }

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message, RequestID string } `json:"error"`
	}
	r.decode(t, &body)
	return body.Error.Code
}

// do sends a request; body is JSON-encoded unless it is a string or []byte.
func (h *harness) do(method, path, token string, body any) response {
	h.t.Helper()
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		reader = strings.NewReader(b)
	case []byte:
		reader = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.url+path, reader)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if reader != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return h.send(req)
}

// offSpec returns h for sending requests that are deliberately not what the
// OpenAPI description allows (malformed bodies, hostile paths): send then
// validates only the answers, which must still be documented ones.
func (h *harness) offSpec() *harness {
	c := *h
	c.offSpecRequests = true
	return &c
}

// send sends req and reads the whole answer. Both are validated against the
// OpenAPI description (openapi_test.go).
func (h *harness) send(req *http.Request) response {
	h.t.Helper()
	spec, err := apiSpec()
	if err != nil {
		h.t.Fatalf("openapi.yaml: %v", err)
	}
	ex := spec.checkRequest(h.t, req, h.offSpecRequests)
	r := h.roundTrip(req)
	spec.checkResponse(h.t, ex, r)
	return r
}

func (h *harness) roundTrip(req *http.Request) response {
	h.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	r, err := readResponse(resp)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func readResponse(resp *http.Response) (response, error) {
	data, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}, err
}

// proposal is the body of a first call.
type proposal struct {
	ConfirmRequired bool            `json:"confirm_required"`
	ConfirmToken    string          `json:"confirm_token"`
	ConfirmationID  string          `json:"confirmation_id"`
	Operation       string          `json:"operation"`
	Summary         string          `json:"summary"`
	Details         billing.Details `json:"details"`
	TTLSeconds      int             `json:"ttl_seconds"`
	ExpiresAt       string          `json:"expires_at"`
}

// executed is the body of a successful second call (or a no-op).
type executed struct {
	OK              bool  `json:"ok"`
	ConfirmRequired *bool `json:"confirm_required"`
	Noop            bool  `json:"noop"`
	Replayed        bool  `json:"replayed"`
	Subscription    struct {
		Plan             string `json:"plan"`
		Status           string `json:"status"`
		CurrentPeriodEnd string `json:"current_period_end"`
	} `json:"subscription"`
}

// propose makes a first call and requires a 202 proposal.
func (h *harness) propose(token, op, to string) proposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, map[string]string{"to": to})
	if r.Status != http.StatusAccepted {
		h.t.Fatalf("first call %s to %s: status %d: %s", op, to, r.Status, r.Body)
	}
	var p proposal
	r.decode(h.t, &p)
	return p
}

// confirm makes a second call.
func (h *harness) confirm(token, op, to, confirmToken string) response {
	h.t.Helper()
	return h.do("POST", "/api/billing/"+op, token, map[string]string{"to": to, "confirm_token": confirmToken})
}

// auditEvents returns the org's audit events, oldest first.
func (h *harness) auditEvents(org string) []billing.AuditEvent {
	h.t.Helper()
	r := h.do("GET", "/api/billing/audit?limit=500", h.admin(org, "auditor"), nil)
	if r.Status != http.StatusOK {
		h.t.Fatalf("audit: %d %s", r.Status, r.Body)
	}
	var body struct{ Events []billing.AuditEvent }
	r.decode(h.t, &body)
	for i, j := 0, len(body.Events)-1; i < j; i, j = i+1, j-1 {
		body.Events[i], body.Events[j] = body.Events[j], body.Events[i]
	}
	return body.Events
}

// eventNames lists "EVENT" or "EVENT:reason" for each event.
func eventNames(events []billing.AuditEvent) []string {
	names := make([]string, 0, len(events))
	for _, e := range events {
		name := e.Event
		if e.Reason != "" {
			name += ":" + e.Reason
		}
		names = append(names, name)
	}
	return names
}

func wantStatus(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if code != "" {
		if got := r.errorCode(t); got != code {
			t.Fatalf("error code %q, want %q: %s", got, code, r.Body)
		}
	}
}

func wantEvents(t *testing.T, got []billing.AuditEvent, want ...string) {
	t.Helper()
	if g := strings.Join(eventNames(got), " "); g != strings.Join(want, " ") {
		t.Fatalf("audit events\n got: %s\nwant: %s", g, strings.Join(want, " "))
	}
}

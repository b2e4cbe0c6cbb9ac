// Package config reads billingd's configuration from the environment, once,
// into a typed struct. Variable names are fixed by the contract (§3); invalid
// values stop the process with a message naming the variable.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/websession"
)

// Config is billingd's configuration.
type Config struct {
	DatabaseURL string
	ListenAddr  string
	// MetricsAddr (METRICS_ADDR) is where /metrics is served, on a listener
	// of its own so that the API's listener never exposes it; "" when
	// disabled (METRICS_ADDR=off).
	MetricsAddr string
	// Pprof (PPROF=true) also serves net/http/pprof's /debug/pprof/ on the
	// metrics listener, for profiling a running replica (make bench
	// -profile); off by default, and never on the API's listener.
	Pprof               bool
	PublicBaseURL       string
	StripeSecretKey     string
	StripeAPIBase       string
	StripeWebhookSecret string
	StripeTimeout       time.Duration
	// StripeMaxNetworkRetries (STRIPE_MAX_NETWORK_RETRIES) is how often
	// stripe-go resends a request that got no answer, a 409, a lock timeout
	// or a 5xx, under the same idempotency key (0–3; default 1).
	StripeMaxNetworkRetries int
	// ConfirmConcurrency (CONFIRM_CONCURRENCY) is how many second calls one
	// replica executes at once, each holding a database connection of the
	// executions pool while Stripe answers; one more is answered 503
	// upstream_unavailable with Retry-After at once (1–1000; default 32).
	ConfirmConcurrency int
	OAuthIssuer        string
	OAuthJWKSURL       string
	OAuthAudiences     []string
	OAuthOrgClaim      string
	ConfirmTTL         time.Duration
	ConfirmClockSkew   time.Duration
	MigrateOnStart     bool
	LogFormat          string
	Plans              []billing.Plan
	RateLimits         billing.RateLimits
	// SignInLimits (RATE_LIMIT_SIGN_INS per client address,
	// RATE_LIMIT_SIGN_INS_TOTAL in all, per RATE_LIMIT_WINDOW) bound the
	// sign-ins anyone may start on the pages.
	SignInLimits   websession.LoginLimits
	PurgeRetention time.Duration
	PurgeInterval  time.Duration
	// SettleInterval (SETTLE_INTERVAL) is how often each replica settles
	// plan changes whose Stripe outcome is unknown, and how long such a
	// change is left to its owner's retry first.
	SettleInterval time.Duration
	// MCPRequestStateKey (MCP_REQUEST_STATE_KEY) seals the request state of
	// MCP elicitations on protocol 2026-07-28; every replica needs the same
	// one. Empty: each process makes its own (fine with one replica).
	MCPRequestStateKey string
	// OIDCClientID (OIDC_CLIENT_ID) is billingd's client at OAUTH_ISSUER for
	// signing people in on the dashboard, approval and verification pages;
	// empty: the pages cannot sign anyone in. OIDCClientSecret
	// (OIDC_CLIENT_SECRET) makes it a confidential client.
	OIDCClientID     string
	OIDCClientSecret string
	// OIDCAudienceParams (OIDC_AUDIENCE_PARAMS) are the authorization
	// request parameters that ask for the access token's audience (the
	// first OAUTH_AUDIENCE value): "audience" (ORY Hydra, Auth0),
	// "resource" (RFC 8707), both (the default), or none (OIDC_AUDIENCE_PARAMS=none,
	// for providers that set the audience on the server: Okta, Keycloak,
	// Entra ID).
	OIDCAudienceParams []string
	// OIDCScopes (OIDC_SCOPES, separated by spaces or commas) are the scopes
	// the sign-in requests; empty: openid, profile and the three billing
	// scopes. The session gets what the provider granted of them.
	OIDCScopes []string
	// VerifyACRValues (VERIFY_ACR_VALUES, comma-separated) are the acr values
	// the verify level accepts, e.g. a passkey's; empty: any.
	VerifyACRValues []string
	// PersonClients (PERSON_CLIENTS, comma-separated) are the OAuth client
	// ids of person-facing apps, such as the operator's own dashboard:
	// their calls are a person's. Every other client, and a token with no
	// client, is an agent's (contract §4, billing/person.go).
	PersonClients []string
	// DevTokenPaste lets the pages sign in with a pasted bearer token; only
	// billingd dev sets it.
	DevTokenPaste bool
	// MCPReplicaID (MCP_REPLICA_ID) names this replica at the front of every
	// MCP session id it issues (protocol 2025-11-25), so that a reverse proxy
	// routes each session to the one process that holds it
	// (docs/deployment-replicas.md). Empty: plain random session ids.
	MCPReplicaID string
	// ReceiptSigningKeys (RECEIPT_SIGNING_KEYS) are PEM files of the receipt
	// signing keys, newest first: the first signs, all are published.
	// Empty: each process generates a key in memory and registers its
	// public half in the database; refused with a live Stripe key
	// (CheckReceiptKeyCustody).
	ReceiptSigningKeys []string
	// FailpointsURL (BILLINGD_FAILPOINTS), for tests only: a failpoint
	// controller asked at every named step of the money path
	// (internal/failpoint). Empty in production: no hook at all.
	FailpointsURL string
	// TrustedProxies (TRUSTED_PROXIES, comma-separated CIDRs) are the
	// reverse proxies whose X-Forwarded-For names the client: its rightmost
	// hop not in them. From any other peer the header is ignored; empty:
	// from every peer.
	TrustedProxies []netip.Prefix
	// Webhooks configures outbound webhooks (webhooks.go).
	Webhooks Webhooks
}

// Load reads and checks every variable. Variables a command needs but that
// have no default are checked by Require.
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL:         getenv("DATABASE_URL"),
		ListenAddr:          or(getenv("LISTEN_ADDR"), "127.0.0.1:8080"),
		StripeSecretKey:     getenv("STRIPE_SECRET_KEY"),
		StripeAPIBase:       getenv("STRIPE_API_BASE"),
		StripeWebhookSecret: getenv("STRIPE_WEBHOOK_SECRET"),
		OAuthIssuer:         getenv("OAUTH_ISSUER"),
		OAuthJWKSURL:        getenv("OAUTH_JWKS_URL"),
		OAuthOrgClaim:       or(getenv("OAUTH_ORG_CLAIM"), "org_id"),
		LogFormat:           or(getenv("LOG_FORMAT"), "json"),
		Plans:               billing.DefaultPlans(),
		MCPRequestStateKey:  getenv("MCP_REQUEST_STATE_KEY"),
		OIDCClientID:        getenv("OIDC_CLIENT_ID"),
		OIDCClientSecret:    getenv("OIDC_CLIENT_SECRET"),
		VerifyACRValues:     splitList(getenv("VERIFY_ACR_VALUES")),
		PersonClients:       splitList(getenv("PERSON_CLIENTS")),
		MCPReplicaID:        getenv("MCP_REPLICA_ID"),
		FailpointsURL:       getenv("BILLINGD_FAILPOINTS"),
	}
	var errs []string
	fail := func(name, format string, args ...any) {
		errs = append(errs, name+": "+fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		fail("LISTEN_ADDR", "want host:port, got %q", c.ListenAddr)
	}
	c.MetricsAddr = metricsAddr(getenv("METRICS_ADDR"), fail)
	c.PublicBaseURL = strings.TrimSuffix(or(getenv("PUBLIC_BASE_URL"), "http://"+c.ListenAddr), "/")
	if !isHTTPURL(c.PublicBaseURL) {
		fail("PUBLIC_BASE_URL", "want an http(s) URL")
	}
	for _, u := range []struct{ name, value string }{{"DATABASE_URL", c.DatabaseURL},
		{"STRIPE_API_BASE", c.StripeAPIBase}, {"OAUTH_ISSUER", c.OAuthIssuer}, {"OAUTH_JWKS_URL", c.OAuthJWKSURL}} {
		name, v := u.name, u.value
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || u.Scheme == "" || u.Host == "" && name != "DATABASE_URL" {
			fail(name, "not a valid URL")
		}
	}
	c.ReceiptSigningKeys = splitList(getenv("RECEIPT_SIGNING_KEYS"))
	c.OAuthAudiences = splitList(getenv("OAUTH_AUDIENCE"))
	if len(c.OAuthAudiences) == 0 {
		c.OAuthAudiences = []string{c.PublicBaseURL, c.PublicBaseURL + "/mcp"}
	}
	c.ConfirmTTL = duration(getenv, "CONFIRM_TTL", 60*time.Second, billing.MinTokenTTL, billing.MaxTokenTTL, fail)
	c.ConfirmClockSkew = duration(getenv, "CONFIRM_CLOCK_SKEW", 0, 0, billing.MaxClockSkew, fail)
	c.StripeTimeout = duration(getenv, "STRIPE_TIMEOUT", 20*time.Second, time.Second, 2*time.Minute, fail)
	c.StripeMaxNetworkRetries = between(getenv, "STRIPE_MAX_NETWORK_RETRIES", stripepayDefaultRetries, 0, stripepayMaxRetries, fail)
	c.ConfirmConcurrency = between(getenv, "CONFIRM_CONCURRENCY", billing.DefaultMaxExecutions, 1, 1000, fail)
	c.MigrateOnStart = boolean(getenv, "MIGRATE_ON_START", true, fail)
	c.Pprof = boolean(getenv, "PPROF", false, fail)
	c.RateLimits = billing.RateLimits{
		Window:         duration(getenv, "RATE_LIMIT_WINDOW", time.Minute, time.Second, time.Hour, fail),
		Proposals:      count(getenv, "RATE_LIMIT_PROPOSALS", 30, fail),
		FailedConfirms: count(getenv, "RATE_LIMIT_FAILED_CONFIRMS", 10, fail),
	}
	c.SignInLimits = websession.LoginLimits{
		Window:    c.RateLimits.Window,
		PerClient: count(getenv, "RATE_LIMIT_SIGN_INS", 20, fail),
		Total:     count(getenv, "RATE_LIMIT_SIGN_INS_TOTAL", 600, fail),
		// Not configurable: enough for a person's retries, and whoever
		// learnt the confirmation's id can make no more.
		PerConfirmation: 10,
	}
	c.TrustedProxies = trustedProxies(getenv("TRUSTED_PROXIES"), fail)
	c.Webhooks = webhooksConfig(getenv, fail)
	c.PurgeRetention = duration(getenv, "PURGE_RETENTION", time.Hour, time.Minute, 90*24*time.Hour, fail)
	c.PurgeInterval = duration(getenv, "PURGE_INTERVAL", time.Minute, time.Second, 24*time.Hour, fail)
	c.SettleInterval = duration(getenv, "SETTLE_INTERVAL", 15*time.Second, 100*time.Millisecond, time.Hour, fail)
	if n := len(c.MCPRequestStateKey); n > 0 && n < minStateKeyBytes {
		fail("MCP_REQUEST_STATE_KEY", "want a random secret of at least %d bytes (e.g. openssl rand -base64 32), got %d", minStateKeyBytes, n)
	}
	if c.OIDCClientSecret != "" && c.OIDCClientID == "" {
		fail("OIDC_CLIENT_SECRET", "set OIDC_CLIENT_ID too")
	}
	c.OIDCAudienceParams = audienceParams(getenv("OIDC_AUDIENCE_PARAMS"), fail)
	c.OIDCScopes = strings.FieldsFunc(getenv("OIDC_SCOPES"), func(r rune) bool { return r == ',' || r == ' ' })
	for _, sc := range c.OIDCScopes {
		if !scopeToken.MatchString(sc) {
			fail("OIDC_SCOPES", "%q is not a scope (RFC 6749: printable ASCII without spaces, quotes or backslashes)", sc)
		}
	}
	for _, v := range c.VerifyACRValues {
		if strings.ContainsAny(v, "\"\\ ") {
			fail("VERIFY_ACR_VALUES", "an acr value may not contain quotes, backslashes or spaces")
		}
	}
	for _, id := range c.PersonClients {
		if !auth.SafeIdentifier(id) || strings.Contains(id, " ") {
			fail("PERSON_CLIENTS", "%q is not a client id as tokens carry it (visible characters, no spaces)", id)
		}
	}
	if c.MCPReplicaID != "" && !replicaIDPattern.MatchString(c.MCPReplicaID) {
		fail("MCP_REPLICA_ID", "want 1 to 32 lower-case letters, digits and -, starting with a letter or digit")
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		fail("LOG_FORMAT", "want json or text")
	}
	if path := getenv("PLANS_FILE"); path != "" {
		plans, err := readPlans(path)
		if err != nil {
			fail("PLANS_FILE", "%v", err)
		} else if _, err := billing.NewCatalog(plans); err != nil {
			fail("PLANS_FILE", "%v", err)
		}
		c.Plans = plans
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("invalid configuration: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// StripeLivemode reports whether changes move real money: the Stripe key is
// not a test-mode key (sk_test_…, rk_test_…). A method, not a field, because
// billingd dev sets the key after Load.
func (c Config) StripeLivemode() bool {
	return !strings.HasPrefix(c.StripeSecretKey, "sk_test_") && !strings.HasPrefix(c.StripeSecretKey, "rk_test_")
}

// CheckReceiptKeyCustody refuses a live Stripe key (sk_live_…, rk_live_…,
// anything but a test key) without RECEIPT_SIGNING_KEYS (contract §11): receipts of changes that
// move real money must be signed with keys the operator holds, never with
// one billingd makes up, which nobody could keep or rotate.
func (c Config) CheckReceiptKeyCustody() error {
	// The same rule as StripeLivemode: a key that is not a test key moves
	// real money (hostile review: sk_x was live for the receipts' livemode
	// and yet signed with a key billingd made up).
	if c.StripeSecretKey != "" && c.StripeLivemode() && len(c.ReceiptSigningKeys) == 0 {
		return errors.New("invalid configuration: RECEIPT_SIGNING_KEYS: required with a live Stripe key " +
			"(STRIPE_SECRET_KEY sk_live_…/rk_live_…): name the PEM files of the receipt signing keys")
	}
	return nil
}

// DefaultMetricsAddr is METRICS_ADDR's default: loopback only, so that
// metrics (route and outcome counts, pool and runtime statistics) reach a
// local scraper or a sidecar, never the internet. 9464 (the OpenTelemetry
// Prometheus exporter's port), not 9090, where Prometheus itself listens.
const DefaultMetricsAddr = "127.0.0.1:9464"

// metricsAddr reads METRICS_ADDR: host:port, "off" to serve no metrics, or
// unset for DefaultMetricsAddr.
func metricsAddr(v string, fail func(name, format string, args ...any)) string {
	switch v {
	case "":
		return DefaultMetricsAddr
	case "off":
		return ""
	}
	if _, _, err := net.SplitHostPort(v); err != nil {
		fail("METRICS_ADDR", "want host:port or off, got %q", v)
	}
	return v
}

// Require reports the first of the named variables that is unset.
func (c Config) Require(names ...string) error {
	values := map[string]string{
		"DATABASE_URL": c.DatabaseURL, "STRIPE_SECRET_KEY": c.StripeSecretKey, "OAUTH_ISSUER": c.OAuthIssuer,
	}
	for _, n := range names {
		if values[n] == "" {
			return fmt.Errorf("invalid configuration: %s is required", n)
		}
	}
	return nil
}

// DefaultAudienceParams is OIDC_AUDIENCE_PARAMS's default: Hydra and Auth0
// read audience and ignore resource, RFC 8707 servers the other way round.
var DefaultAudienceParams = []string{"audience", "resource"}

// audienceParams reads OIDC_AUDIENCE_PARAMS: a comma-separated subset of
// audience and resource, or none.
func audienceParams(v string, fail func(name, format string, args ...any)) []string {
	list := splitList(v)
	switch {
	case len(list) == 0:
		return DefaultAudienceParams
	case len(list) == 1 && list[0] == "none":
		return nil
	}
	for _, p := range list {
		if p != "audience" && p != "resource" {
			fail("OIDC_AUDIENCE_PARAMS", "want audience, resource, audience,resource or none, got %q", v)
			return DefaultAudienceParams
		}
	}
	return list
}

// trustedProxies reads TRUSTED_PROXIES: CIDRs, each written as its
// network (10.0.0.0/8, not 10.1.2.3/8, which is more likely a typo than
// meant).
func trustedProxies(v string, fail func(name, format string, args ...any)) []netip.Prefix {
	var out []netip.Prefix
	for _, part := range splitList(v) {
		p, err := netip.ParsePrefix(part)
		switch {
		case err != nil:
			fail("TRUSTED_PROXIES", "%q is not a CIDR (one proxy: 10.0.0.5/32 or fd00::5/128)", part)
		case p != p.Masked():
			fail("TRUSTED_PROXIES", "%q has bits set past its prefix length; did you mean %s?", part, p.Masked())
		default:
			out = append(out, p)
		}
	}
	return out
}

// scopeToken is RFC 6749's scope-token.
var scopeToken = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]+$`)

// replicaIDPattern: what a reverse proxy can match in a session id, and
// nothing that could be mistaken for its separator.
var replicaIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// minStateKeyBytes is mcp.MinRequestStateKeyBytes; config does not import
// the transports.
const minStateKeyBytes = 32

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func duration(getenv func(string) string, name string, def, lo, hi time.Duration, fail func(string, string, ...any)) time.Duration {
	v := getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		fail(name, "want a duration from %s to %s, got %q", lo, hi, v)
		return def
	}
	return d
}

func count(getenv func(string) string, name string, def int, fail func(string, string, ...any)) int {
	v := getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1_000_000 {
		fail(name, "want a whole number from 0 (no limit) to 1000000, got %q", v)
		return def
	}
	return n
}

// between reads a whole number from lo to hi.
func between(getenv func(string) string, name string, def, lo, hi int, fail func(string, string, ...any)) int {
	v := getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		fail(name, "want a whole number from %d to %d, got %q", lo, hi, v)
		return def
	}
	return n
}

// stripepay's DefaultMaxNetworkRetries and MaxNetworkRetriesLimit; config
// does not import the adapters (a test checks they agree).
const (
	stripepayDefaultRetries = 1
	stripepayMaxRetries     = 3
)

func boolean(getenv func(string) string, name string, def bool, fail func(string, string, ...any)) bool {
	v := getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fail(name, "want true or false, got %q", v)
		return def
	}
	return b
}

// readPlans reads a JSON array of plans:
// [{"id":"pro","name":"Pro","amount_cents":1900,"currency":"usd","interval":"month","stripe_price_id":"price_…"}].
func readPlans(path string) ([]billing.Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var plans []billing.Plan
	if err := json.Unmarshal(data, &plans); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return plans, nil
}

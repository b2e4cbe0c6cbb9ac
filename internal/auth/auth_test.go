package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

const (
	apiAudience = "https://billing.test"
	mcpAudience = "https://billing.test/mcp"
)

// startIssuer runs a dev issuer with alg on httptest, its URL being the
// server's URL plus path.
func startIssuer(t testing.TB, alg, path string) *devissuer.Issuer {
	t.Helper()
	iss, err := devissuer.NewWithAlg("", alg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(iss.Handler())
	t.Cleanup(srv.Close)
	iss.SetIssuerURL(srv.URL + path)
	return iss
}

// config is the Config a billingd pointed at iss would use, with the JWKS URL
// given so that tests not about discovery do not depend on it.
func config(iss *devissuer.Issuer) auth.Config {
	return auth.Config{
		Issuer:    iss.IssuerURL(),
		JWKSURL:   iss.JWKSURL(),
		Audiences: []string{apiAudience, mcpAudience},
	}
}

func newVerifier(t testing.TB, cfg auth.Config) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// validClaims is a token billingd must accept; cases change one thing.
func validClaims() devissuer.Claims {
	return devissuer.Claims{
		Subject:  "user-1",
		Org:      "org-1",
		Client:   "agent-1",
		Scopes:   []string{auth.ScopeRead, auth.ScopeWrite},
		Audience: []string{mcpAudience},
	}
}

func mint(t *testing.T, iss *devissuer.Issuer, c devissuer.Claims) string {
	t.Helper()
	tok, err := iss.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func signRaw(t *testing.T, iss *devissuer.Issuer, claims jwt.MapClaims, m jwt.SigningMethod, key any, kid string) string {
	t.Helper()
	tok, err := iss.SignRaw(claims, m, key, kid)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// mustVerify verifies tok and fails the test on any error.
func mustVerify(t *testing.T, v *auth.Verifier, tok string) auth.Identity {
	t.Helper()
	id, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return id
}

// wantRejected checks that err is a rejection with the given reason and that
// the message does not echo the token.
func wantRejected(t *testing.T, err error, reason, tok string) {
	t.Helper()
	if !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("error %v does not wrap ErrInvalidToken", err)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not say %q", err, reason)
	}
	if tok != "" && strings.Contains(err.Error(), tok) {
		t.Error("error message contains the token")
	}
}

func TestVerifyAccepts(t *testing.T) {
	for _, alg := range []string{devissuer.AlgES256, devissuer.AlgRS256, devissuer.AlgEdDSA} {
		t.Run(alg, func(t *testing.T) {
			iss := startIssuer(t, alg, "")
			v := newVerifier(t, config(iss))
			id := mustVerify(t, v, mint(t, iss, validClaims()))

			if id.Subject != "user-1" || id.Org != "org-1" || id.Client != "agent-1" {
				t.Errorf("identity = %+v", id)
			}
			if !slices.Equal(id.Scopes, []string{auth.ScopeRead, auth.ScopeWrite}) {
				t.Errorf("scopes = %v", id.Scopes)
			}
			if d := time.Until(id.Expiry); d <= 0 || d > devissuer.DefaultTTL {
				t.Errorf("expiry in %v", d)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgRS256, "")
	v := newVerifier(t, config(iss))

	attacker, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	with := func(change func(*devissuer.Claims)) func(*testing.T) string {
		return func(t *testing.T) string {
			c := validClaims()
			change(&c)
			return mint(t, iss, c)
		}
	}
	extra := func(name string, value any) func(*testing.T) string {
		return with(func(c *devissuer.Claims) { c.Extra = map[string]any{name: value} })
	}
	raw := func(m jwt.SigningMethod, key func() any, kid func() string) func(*testing.T) string {
		return func(t *testing.T) string {
			return signRaw(t, iss, iss.BuildClaims(validClaims()), m, key(), kid())
		}
	}
	issuerKID := func() string { return iss.KeyID() }
	publicPEM := func() any { return iss.PublicKeyPEM() }

	for _, tc := range []struct {
		name   string
		token  func(*testing.T) string
		reason string
	}{
		{"empty", func(*testing.T) string { return "" }, "empty"},
		{"garbage", func(*testing.T) string { return "not.a.jwt" }, "malformed"},
		{"longer than 8 KiB", func(*testing.T) string { return strings.Repeat("a", auth.MaxTokenLength+1) }, "too long"},
		{"expired", with(func(c *devissuer.Claims) { c.TTL = -time.Minute }), "expired"},
		{"missing exp", extra("exp", nil), "missing exp"},
		{"future nbf", extra("nbf", time.Now().Add(time.Hour).Unix()), "not valid yet"},
		{"wrong iss", extra("iss", "https://evil.test"), "wrong issuer"},
		{"missing iss", extra("iss", nil), "missing iss"},
		{"wrong aud", with(func(c *devissuer.Claims) { c.Audience = []string{"https://other.test"} }), "wrong audience"},
		{"no aud", with(func(c *devissuer.Claims) { c.Audience = nil }), "missing aud"},
		{"missing org claim", with(func(c *devissuer.Claims) { c.Org = "" }), "missing org_id"},
		{"org claim not a string", extra("org_id", 42), "malformed org_id"},
		{"missing sub", with(func(c *devissuer.Claims) { c.Subject = "" }), "missing sub"},
		{"scope not a string", extra("scope", []string{"billing:read"}), "malformed scope"},
		// Which client holds the token decides whether its call is a
		// person's (PERSON_CLIENTS): two client claims that disagree (a
		// token exchanged for an agent that kept the person's azp) name
		// no one client.
		{"azp and client_id disagree", with(func(c *devissuer.Claims) {
			c.Client, c.Extra = "test-console", map[string]any{"client_id": "agent-bot"}
		}), "azp and client_id disagree"},
		{"act not an object", extra("act", "agent-bot"), "malformed act"},
		{"scp with a non-string", with(func(c *devissuer.Claims) {
			c.Scopes = nil
			c.Extra = map[string]any{"scp": []any{"billing:read", 7}}
		}), "malformed scp"},
		{"alg none", raw(jwt.SigningMethodNone, func() any { return jwt.UnsafeAllowNoneSignatureType }, issuerKID),
			"disallowed algorithm"},
		// The classic algorithm confusion: a verifier that lets the token pick
		// the algorithm would use the RSA public key bytes as the HMAC secret.
		{"HS256 keyed with the public key PEM", raw(jwt.SigningMethodHS256, publicPEM, issuerKID), "disallowed algorithm"},
		{"HS256 without kid", raw(jwt.SigningMethodHS256, publicPEM, func() string { return "" }), "disallowed algorithm"},
		{"unknown kid", raw(jwt.SigningMethodES256, func() any { return attacker }, func() string { return "attacker-kid" }),
			"unknown signing key"},
		{"foreign key under the issuer's kid", raw(jwt.SigningMethodRS256, func() any { return mustRSAKey(t) }, issuerKID),
			"bad signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token(t)
			id, err := v.Verify(context.Background(), tok)
			if err == nil {
				t.Fatalf("accepted: %+v", id)
			}
			wantRejected(t, err, tc.reason, tok)
		})
	}
}

func TestLeeway(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	cfg := config(iss)
	cfg.Leeway = time.Minute
	v := newVerifier(t, cfg)

	justExpired := validClaims()
	justExpired.TTL = -10 * time.Second
	mustVerify(t, v, mint(t, iss, justExpired))

	longExpired := validClaims()
	longExpired.TTL = -2 * time.Minute
	_, err := v.Verify(context.Background(), mint(t, iss, longExpired))
	wantRejected(t, err, "expired", "")
}

func TestIdentityClaims(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))

	for _, tc := range []struct {
		name       string
		client     string
		scopes     []string
		extra      map[string]any
		wantClient string
		wantScopes []string
	}{
		{name: "scope string", scopes: []string{"billing:read", "billing:admin"},
			wantScopes: []string{"billing:read", "billing:admin"}},
		{name: "scp array", extra: map[string]any{"scp": []string{"billing:write", "billing:read"}},
			wantScopes: []string{"billing:write", "billing:read"}},
		{name: "scp string", extra: map[string]any{"scp": "billing:write  billing:read"},
			wantScopes: []string{"billing:write", "billing:read"}},
		{name: "scope wins over scp", scopes: []string{"billing:read"}, extra: map[string]any{"scp": []string{"billing:admin"}},
			wantScopes: []string{"billing:read"}},
		{name: "no scopes", wantScopes: nil},
		{name: "azp", client: "agent-azp", wantClient: "agent-azp"},
		{name: "client_id", extra: map[string]any{"client_id": "agent-cid"}, wantClient: "agent-cid"},
		{name: "azp and client_id that agree", client: "agent-azp", extra: map[string]any{"client_id": "agent-azp"},
			wantClient: "agent-azp"},
		{name: "no client", wantClient: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validClaims()
			c.Client, c.Scopes, c.Extra = tc.client, tc.scopes, tc.extra
			id := mustVerify(t, v, mint(t, iss, c))
			if id.Client != tc.wantClient {
				t.Errorf("client = %q, want %q", id.Client, tc.wantClient)
			}
			if !slices.Equal(id.Scopes, tc.wantScopes) {
				t.Errorf("scopes = %q, want %q", id.Scopes, tc.wantScopes)
			}
		})
	}
}

func TestCustomOrgClaim(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	iss.OrgClaim = "https://billing.test/org"
	cfg := config(iss)
	cfg.OrgClaim = iss.OrgClaim
	v := newVerifier(t, cfg)

	if id := mustVerify(t, v, mint(t, iss, validClaims())); id.Org != "org-1" {
		t.Errorf("org = %q", id.Org)
	}
	c := validClaims()
	c.Extra = map[string]any{"org_id": "org-2", iss.OrgClaim: nil}
	_, err := v.Verify(context.Background(), mint(t, iss, c))
	wantRejected(t, err, "missing https://billing.test/org", "")
}

func TestHasScope(t *testing.T) {
	id := auth.Identity{Scopes: []string{"billing:writer", "billing:write:x", auth.ScopeAdmin}}
	for _, tc := range []struct {
		scope string
		want  bool
	}{
		{auth.ScopeAdmin, true},
		{auth.ScopeWrite, false}, // neither a prefix of a granted scope nor implied by admin
		{auth.ScopeRead, false},
		{"billing", false},
		{"", false},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			if got := id.HasScope(tc.scope); got != tc.want {
				t.Errorf("HasScope(%q) = %v, want %v", tc.scope, got, tc.want)
			}
		})
	}
}

// TestKeyRotation is the field-notes scenario: the issuer starts signing with
// a new key and the running verifier must accept its tokens without restart.
func TestKeyRotation(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))
	before := mint(t, iss, validClaims())
	mustVerify(t, v, before)

	if err := iss.Rotate(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, v, mint(t, iss, validClaims())) // new kid: refreshed on demand
	mustVerify(t, v, before)                      // the retired key is still published

}

func TestDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string                             // issuer URL path
		wrap func(http.Handler) http.Handler    // nil: serve everything
		iss  func(iss *devissuer.Issuer) string // Config.Issuer; nil: the issuer URL
	}{
		{name: "RFC 8414 metadata"},
		{name: "OpenID configuration fallback", wrap: hide("/.well-known/oauth-authorization-server")},
		{name: "issuer with a path", path: "/tenant-a"},
		{name: "issuer with a path, OpenID appended form", path: "/tenant-a",
			wrap: hide("/.well-known/oauth-authorization-server/tenant-a", "/.well-known/openid-configuration/tenant-a")},
		{name: "configured issuer with trailing slash", iss: func(iss *devissuer.Issuer) string { return iss.IssuerURL() + "/" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iss, err := devissuer.New("")
			if err != nil {
				t.Fatal(err)
			}
			var h http.Handler = iss.Handler()
			if tc.wrap != nil {
				h = tc.wrap(h)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			iss.SetIssuerURL(srv.URL + tc.path)

			cfg := config(iss)
			cfg.JWKSURL = ""
			if tc.iss != nil {
				cfg.Issuer = tc.iss(iss)
			}
			v := newVerifier(t, cfg)
			mustVerify(t, v, mint(t, iss, validClaims()))
			if v.Issuer() != iss.IssuerURL() {
				t.Errorf("Issuer() = %q, want the metadata's %q", v.Issuer(), iss.IssuerURL())
			}
		})
	}
}

// TestIssuerRule: one rule for iss everywhere (auth.SameIssuer): the
// configured issuer and the token's may differ by a trailing slash, whether
// the JWKS was discovered or configured; any other difference is another
// issuer. A metadata document naming another issuer stops NewVerifier with
// an error naming OAUTH_ISSUER.
func TestIssuerRule(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	base := iss.IssuerURL()
	for _, discovered := range []bool{true, false} {
		for _, configured := range []string{base, base + "/"} {
			cfg := config(iss)
			cfg.Issuer = configured
			if discovered {
				cfg.JWKSURL = ""
			}
			v := newVerifier(t, cfg)
			for tokenIss, ok := range map[string]bool{base: true, base + "/": true, base + "//": false,
				base + "/x": false, strings.Replace(base, "http://", "https://", 1): false} {
				tok := mint(t, iss, func() devissuer.Claims { c := validClaims(); c.Extra = map[string]any{"iss": tokenIss}; return c }())
				_, err := v.Verify(context.Background(), tok)
				if ok && err != nil {
					t.Errorf("discovered %v, configured %s, iss %s: %v", discovered, configured, tokenIss, err)
				}
				if !ok {
					wantRejected(t, err, "wrong issuer", tok)
				}
			}
		}
	}
	for a, b := range map[string]string{"": "", "https://a.test": "", "https://a.test/": "https://a.test//"} {
		if auth.SameIssuer(a, b) {
			t.Errorf("SameIssuer(%q, %q)", a, b)
		}
	}
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q}`, base, iss.JWKSURL())
	}))
	t.Cleanup(impostor.Close)
	cfg := config(iss)
	cfg.Issuer, cfg.JWKSURL = impostor.URL, ""
	_, err := auth.NewVerifier(context.Background(), cfg)
	var mismatch *auth.IssuerMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "OAUTH_ISSUER") || mismatch.Discovered != base {
		t.Fatalf("metadata naming another issuer: %v", err)
	}
}

// hide makes the wrapped handler answer 404 on the given paths.
func hide(paths ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if slices.Contains(paths, r.URL.Path) {
				http.NotFound(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func TestNewVerifierRejectsConfig(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	// impostor's metadata points at iss's keys but names iss as the issuer,
	// not itself: its keys must not be trusted for tokens naming impostor.
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q}`, iss.IssuerURL(), iss.JWKSURL())
	}))
	t.Cleanup(impostor.Close)
	deadURL := func() string {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		return srv.URL
	}()

	for _, tc := range []struct {
		name   string
		change func(*auth.Config)
	}{
		{"no issuer", func(c *auth.Config) { c.Issuer = "" }},
		{"no audience", func(c *auth.Config) { c.Audiences = nil }},
		{"empty audience", func(c *auth.Config) { c.Audiences = []string{apiAudience, ""} }},
		{"negative leeway", func(c *auth.Config) { c.Leeway = -time.Second }},
		{"JWKS URL not http", func(c *auth.Config) { c.JWKSURL = "file:///etc/passwd" }},
		{"JWKS unreachable", func(c *auth.Config) { c.JWKSURL = deadURL + "/jwks.json" }},
		{"issuer without metadata", func(c *auth.Config) { c.Issuer, c.JWKSURL = deadURL, "" }},
		{"metadata names another issuer", func(c *auth.Config) { c.Issuer, c.JWKSURL = impostor.URL, "" }},
		{"issuer not a URL", func(c *auth.Config) { c.Issuer, c.JWKSURL = "billing", "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(iss)
			tc.change(&cfg)
			v, err := auth.NewVerifier(context.Background(), cfg)
			if err == nil {
				v.Close()
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
}

func mustRSAKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestInvisibleIdentityClaims: sub, the org claim, azp and client_id with
// characters a person cannot see (or that display as something else) are
// refused like an invalid token (contract §4). "\u202enimda-omed" displays
// as "demo-admin"; "\u200bdemo-agent" as "demo-agent".
func TestInvisibleIdentityClaims(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))
	hostile := map[string]string{
		"bidi override":      "\u202enimda-omed",
		"zero-width space":   "\u200bdemo-agent",
		"zero-width joiner":  "demo\u200dadmin",
		"bidi isolate":       "demo\u2066admin",
		"byte order mark":    "\ufeffdemo-admin",
		"soft hyphen":        "demo\u00adadmin",
		"private use":        "demo\ue000admin",
		"Hangul filler":      "demo\u3164admin",
		"variation selector": "demo\ufe0fadmin",
		"no-break space":     "demo\u00a0admin",
		"ideographic space":  "demo\u3000admin",
		"line separator":     "demo\u2028admin",
		"tab":                "demo\tadmin",
		"unassigned":         "demo\U000e0fffadmin",
		"tag character":      "demo\U000e0041admin",
	}
	for name, value := range hostile {
		for _, claim := range []string{"sub", "org_id", "azp", "client_id"} {
			t.Run(name+"/"+claim, func(t *testing.T) {
				c := validClaims()
				c.Extra = map[string]any{claim: value}
				_, err := v.Verify(context.Background(), mint(t, iss, c))
				if !errors.Is(err, auth.ErrInvalidToken) {
					t.Fatalf("%s %q accepted: %v", claim, value, err)
				}
			})
		}
	}
	for _, fine := range []string{"demo-admin", "Zoë Ñúñez", "用户-42", "auth0|5f3c9a", "user@example.com", "a b"} {
		c := validClaims()
		c.Subject = fine
		if id := mustVerify(t, v, mint(t, iss, c)); id.Subject != fine {
			t.Errorf("sub %q read as %q", fine, id.Subject)
		}
	}
}

// TestAuthenticationClaims: auth_time and acr reach the identity; a
// malformed one refuses the token.
func TestAuthenticationClaims(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	c := validClaims()
	c.Extra = map[string]any{"auth_time": at.Unix(), "acr": "urn:example:passkey"}
	id := mustVerify(t, v, mint(t, iss, c))
	if !id.AuthTime.Equal(at) || id.ACR != "urn:example:passkey" {
		t.Fatalf("auth_time %v acr %q, want %v and the passkey acr", id.AuthTime, id.ACR, at)
	}
	if id := mustVerify(t, v, mint(t, iss, validClaims())); !id.AuthTime.IsZero() || id.ACR != "" {
		t.Fatalf("a token without them: auth_time %v acr %q", id.AuthTime, id.ACR)
	}
	for name, extra := range map[string]map[string]any{
		"auth_time string": {"auth_time": "yesterday"},
		"auth_time zero":   {"auth_time": 0},
		"acr number":       {"acr": 2},
		"acr empty":        {"acr": ""},
		"acr invisible":    {"acr": "pass\u200bkey"},
	} {
		t.Run(name, func(t *testing.T) {
			c := validClaims()
			c.Extra = extra
			if _, err := v.Verify(context.Background(), mint(t, iss, c)); !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("accepted: %v", err)
			}
		})
	}
}

// TestTokenActingOnBehalf: a token that names an actor (RFC 8693 act: an
// agent that exchanged a person's token, say) is marked OnBehalf, whatever
// its client, so that its call is never counted as the person's own
// (contract §4); a token without act is not.
func TestTokenActingOnBehalf(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  bool
	}{
		{"no act", nil, false},
		{"act naming the agent", map[string]any{"act": map[string]any{"sub": "agent-bot"}}, true},
		{"nested act", map[string]any{"act": map[string]any{"sub": "agent-bot", "act": map[string]any{"sub": "gateway"}}}, true},
		{"empty act", map[string]any{"act": map[string]any{}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validClaims()
			c.Client, c.Extra = "test-console", tc.extra
			id := mustVerify(t, v, mint(t, iss, c))
			if id.OnBehalf != tc.want || id.Client != "test-console" {
				t.Errorf("OnBehalf = %v, client %q; want %v, test-console", id.OnBehalf, id.Client, tc.want)
			}
		})
	}
}

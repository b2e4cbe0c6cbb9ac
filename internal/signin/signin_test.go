package signin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

const clientID = "billingd-pages"

func newClient(t *testing.T) (*Client, *devissuer.Issuer) {
	t.Helper()
	iss := startIssuer(t)
	c, err := New(context.Background(), testConfig(iss.IssuerURL()))
	if err != nil {
		t.Fatal(err)
	}
	return c, iss
}

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

func testConfig(issuer string) Config {
	return Config{Issuer: issuer, ClientID: clientID, RedirectURL: "http://127.0.0.1:1/auth/callback",
		Audience: "http://127.0.0.1:1", AudienceParams: []string{ParamAudience, ParamResource}}
}

// TestIDTokenChecks: the ID token must be signed by the issuer for this
// client (go-oidc: iss, aud, exp), carry the nonce of this sign-in, a
// displayable sub, and for a verification an auth_time after it began.
func TestIDTokenChecks(t *testing.T) {
	c, iss := newClient(t)
	now := time.Now()
	began := now.Add(-10 * time.Second)
	valid := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": iss.IssuerURL(), "aud": clientID, "sub": "vera", "nonce": "n-1",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "auth_time": now.Unix(), "acr": "urn:pwd"}
	}
	cases := []struct {
		name   string
		change func(jwt.MapClaims)
		fresh  bool
		ok     bool
	}{
		{"valid", func(jwt.MapClaims) {}, true, true},
		{"wrong nonce", func(c jwt.MapClaims) { c["nonce"] = "n-2" }, false, false},
		{"no nonce", func(c jwt.MapClaims) { delete(c, "nonce") }, false, false},
		{"another client's token", func(c jwt.MapClaims) { c["aud"] = "someone-else" }, false, false},
		{"expired", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }, false, false},
		{"another issuer", func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }, false, false},
		{"invisible sub", func(c jwt.MapClaims) { c["sub"] = "\u202enimda-omed" }, false, false},
		{"old auth_time for a verification", func(c jwt.MapClaims) { c["auth_time"] = began.Add(-time.Hour).Unix() }, true, false},
		{"no auth_time for a verification", func(c jwt.MapClaims) { delete(c, "auth_time") }, true, false},
		{"old auth_time for a plain sign-in", func(c jwt.MapClaims) { c["auth_time"] = began.Add(-time.Hour).Unix() }, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claims := valid()
			tc.change(claims)
			raw, err := iss.MintIDToken(claims)
			if err != nil {
				t.Fatal(err)
			}
			var after time.Time
			if tc.fresh {
				after = began
			}
			res, err := c.checkIDToken(context.Background(), raw, "n-1", after)
			if tc.ok && (err != nil || res.Subject != "vera" || res.ACR != "urn:pwd") {
				t.Fatalf("refused: %+v %v", res, err)
			}
			if !tc.ok && !errors.Is(err, ErrSignIn) {
				t.Fatalf("accepted: %+v %v", res, err)
			}
		})
	}
}

// TestAuthURL: PKCE S256, nonce, billingd's API as the audience (both
// parameters by default) and the billing scopes; a verification asks for a
// new authentication and the configured acr values.
func TestAuthURL(t *testing.T) {
	c, _ := newClient(t)
	r := NewRequest()
	u, err := url.Parse(c.AuthURL(r, true, []string{"urn:passkey"}))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, want := range map[string]string{"client_id": clientID, "state": r.State, "nonce": r.Nonce,
		"code_challenge_method": "S256", "max_age": "0", "prompt": "login", "acr_values": "urn:passkey",
		"audience": "http://127.0.0.1:1", "resource": "http://127.0.0.1:1", "response_type": "code",
		"scope": "openid profile billing:read billing:write billing:admin"} {
		if q.Get(k) != want {
			t.Errorf("%s = %q, want %q", k, q.Get(k), want)
		}
	}
	if q.Get("code_challenge") == "" || strings.Contains(u.String(), r.Verifier) {
		t.Errorf("PKCE: challenge %q, verifier leaked: %v", q.Get("code_challenge"), strings.Contains(u.String(), r.Verifier))
	}
	plain, _ := url.Parse(c.AuthURL(r, false, nil))
	if plain.Query().Has("max_age") || plain.Query().Has("prompt") {
		t.Errorf("a plain sign-in asks for re-authentication: %s", plain)
	}
}

// TestAuthURLFollowsConfiguration: OIDC_AUDIENCE_PARAMS picks the parameters
// that carry the audience (none: the provider sets it), OIDC_SCOPES the
// scopes, always with openid.
func TestAuthURLFollowsConfiguration(t *testing.T) {
	iss := startIssuer(t)
	cases := []struct {
		name         string
		params       []string
		scopes       []string
		wantAudience bool
		wantResource bool
		wantScope    string
	}{
		{"audience only (Hydra, Auth0)", []string{ParamAudience}, nil, true, false,
			"openid profile billing:read billing:write billing:admin"},
		{"resource only (RFC 8707)", []string{ParamResource}, []string{"openid", "billing:read"}, false, true,
			"openid billing:read"},
		{"none (Okta, Keycloak, Entra ID)", nil, []string{"api://billingd/billing:read", "offline_access"}, false, false,
			"openid api://billingd/billing:read offline_access"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(iss.IssuerURL())
			cfg.AudienceParams, cfg.Scopes = tc.params, tc.scopes
			c, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := url.ParseQuery(strings.SplitN(c.AuthURL(NewRequest(), false, nil), "?", 2)[1])
			if q.Has("audience") != tc.wantAudience || q.Has("resource") != tc.wantResource || q.Get("scope") != tc.wantScope {
				t.Errorf("audience %q, resource %q, scope %q", q.Get("audience"), q.Get("resource"), q.Get("scope"))
			}
		})
	}
	cfg := testConfig(iss.IssuerURL())
	cfg.AudienceParams = []string{"aud"}
	if _, err := New(context.Background(), cfg); err == nil {
		t.Error("an unknown audience parameter was accepted")
	}
}

// TestIssuerSpellings: OAUTH_ISSUER with or without the trailing slash the
// provider's metadata has is the same issuer, for discovery and for ID
// tokens (auth.SameIssuer); another issuer stops the sign-in from being
// built, with an error that names OAUTH_ISSUER.
func TestIssuerSpellings(t *testing.T) {
	iss := startIssuer(t) // its metadata: no trailing slash
	now := time.Now()
	for _, configured := range []string{iss.IssuerURL(), iss.IssuerURL() + "/"} {
		c, err := New(context.Background(), testConfig(configured))
		if err != nil {
			t.Fatalf("%s: %v", configured, err)
		}
		for _, tokenIss := range []string{iss.IssuerURL(), iss.IssuerURL() + "/"} {
			raw, err := iss.MintIDToken(jwt.MapClaims{"iss": tokenIss, "aud": clientID, "sub": "vera", "nonce": "n-1",
				"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.checkIDToken(context.Background(), raw, "n-1", time.Time{}); err != nil {
				t.Errorf("configured %s, ID token from %s: %v", configured, tokenIss, err)
			}
		}
	}
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + iss.IssuerURL() + `","authorization_endpoint":"` + iss.IssuerURL() + `/authorize"}`))
	}))
	t.Cleanup(elsewhere.Close)
	_, err := New(context.Background(), testConfig(elsewhere.URL))
	var mismatch *auth.IssuerMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "OAUTH_ISSUER") {
		t.Fatalf("another issuer: %v", err)
	}
}

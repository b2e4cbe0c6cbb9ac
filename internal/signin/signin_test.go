package signin

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/internal/devissuer"
)

const clientID = "billingd-pages"

func newClient(t *testing.T) (*Client, *devissuer.Issuer) {
	t.Helper()
	iss, err := devissuer.New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(iss.Handler())
	t.Cleanup(srv.Close)
	iss.SetIssuerURL(srv.URL)
	c, err := New(context.Background(), Config{Issuer: srv.URL, ClientID: clientID,
		RedirectURL: "http://127.0.0.1:1/auth/callback", Resource: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return c, iss
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

// TestAuthURL: PKCE S256, nonce, resource; a verification asks for a new
// authentication and the configured acr values.
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
		"resource": "http://127.0.0.1:1", "response_type": "code"} {
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

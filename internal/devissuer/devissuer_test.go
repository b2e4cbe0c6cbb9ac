package devissuer_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/internal/devissuer"
)

// start serves iss on httptest at the given path prefix ("" for the root)
// and points the issuer URL at it.
func start(t *testing.T, iss *devissuer.Issuer, path string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(iss.Handler())
	t.Cleanup(srv.Close)
	iss.SetIssuerURL(srv.URL + path)
	return srv
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// parse verifies tok against the JWKS the issuer serves right now.
func parse(t *testing.T, iss *devissuer.Issuer, tok string) (jwt.MapClaims, error) {
	t.Helper()
	_, body := get(t, iss.JWKSURL())
	kf, err := keyfunc.NewJWKSetJSON(body)
	if err != nil {
		t.Fatalf("load JWKS: %v", err)
	}
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(tok, claims, kf.Keyfunc)
	return claims, err
}

func TestMetadata(t *testing.T) {
	for _, tc := range []struct {
		name  string
		path  string // issuer URL path
		paths []string
	}{
		{"bare origin", "", []string{
			"/.well-known/oauth-authorization-server",
			"/.well-known/openid-configuration",
		}},
		{"issuer with path", "/tenant", []string{
			"/.well-known/oauth-authorization-server/tenant",
			"/.well-known/openid-configuration/tenant",
			"/tenant/.well-known/openid-configuration",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iss, err := devissuer.New("")
			if err != nil {
				t.Fatal(err)
			}
			srv := start(t, iss, tc.path)
			for _, p := range tc.paths {
				status, body := get(t, srv.URL+p)
				if status != http.StatusOK {
					t.Fatalf("%s: status %d", p, status)
				}
				var md struct {
					Issuer  string `json:"issuer"`
					JWKSURI string `json:"jwks_uri"`
				}
				if err := json.Unmarshal(body, &md); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if md.Issuer != srv.URL+tc.path || md.JWKSURI != srv.URL+tc.path+"/jwks.json" {
					t.Errorf("%s: got %+v", p, md)
				}
			}
			if status, _ := get(t, iss.JWKSURL()); status != http.StatusOK {
				t.Errorf("jwks: status %d", status)
			}
			if status, _ := get(t, srv.URL+"/nope"); status != http.StatusNotFound {
				t.Errorf("unknown path: status %d", status)
			}
		})
	}
}

func TestMintVerifiesAgainstJWKS(t *testing.T) {
	for _, alg := range []string{devissuer.AlgES256, devissuer.AlgRS256, devissuer.AlgEdDSA} {
		t.Run(alg, func(t *testing.T) {
			iss, err := devissuer.NewWithAlg("", alg)
			if err != nil {
				t.Fatal(err)
			}
			start(t, iss, "")
			tok, err := iss.Mint(devissuer.Claims{
				Subject: "user-1", Org: "org-1", Client: "agent-1",
				Scopes: []string{"billing:read", "billing:write"}, Audience: []string{"https://api.test"},
			})
			if err != nil {
				t.Fatal(err)
			}
			claims, err := parse(t, iss, tok)
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			want := map[string]any{
				"iss": iss.IssuerURL(), "sub": "user-1", "org_id": "org-1",
				"azp": "agent-1", "scope": "billing:read billing:write",
			}
			for k, v := range want {
				if claims[k] != v {
					t.Errorf("%s = %v, want %v", k, claims[k], v)
				}
			}
			for _, k := range []string{"aud", "iat", "nbf", "exp", "jti"} {
				if _, ok := claims[k]; !ok {
					t.Errorf("claim %s missing", k)
				}
			}
		})
	}
}

func TestBuildClaims(t *testing.T) {
	iss, err := devissuer.New("https://issuer.test/")
	if err != nil {
		t.Fatal(err)
	}
	iss.OrgClaim = "tenant"

	t.Run("defaults", func(t *testing.T) {
		c := iss.BuildClaims(devissuer.Claims{Org: "o"})
		if c["iss"] != "https://issuer.test" {
			t.Errorf("iss = %v", c["iss"])
		}
		if c["tenant"] != "o" {
			t.Errorf("org claim = %v", c["tenant"])
		}
		for _, k := range []string{"sub", "azp", "scope", "aud", "org_id"} {
			if _, ok := c[k]; ok {
				t.Errorf("claim %s set for an empty field", k)
			}
		}
		exp, _ := c.GetExpirationTime()
		if d := time.Until(exp.Time); d < devissuer.DefaultTTL-time.Minute || d > devissuer.DefaultTTL {
			t.Errorf("exp in %v, want about %v", d, devissuer.DefaultTTL)
		}
	})
	t.Run("extra adds, replaces and removes", func(t *testing.T) {
		c := iss.BuildClaims(devissuer.Claims{
			Subject: "s",
			Extra:   map[string]any{"exp": nil, "sub": "other", "scp": []string{"a"}},
		})
		if _, ok := c["exp"]; ok {
			t.Error("exp not removed")
		}
		if c["sub"] != "other" {
			t.Errorf("sub = %v", c["sub"])
		}
		if _, ok := c["scp"]; !ok {
			t.Error("scp not added")
		}
	})
	t.Run("negative TTL mints an expired token", func(t *testing.T) {
		c := iss.BuildClaims(devissuer.Claims{TTL: -time.Minute})
		exp, _ := c.GetExpirationTime()
		if !exp.Before(time.Now()) {
			t.Errorf("exp %v not in the past", exp)
		}
	})
}

func TestRotateKeepsPreviousKey(t *testing.T) {
	iss, err := devissuer.New("")
	if err != nil {
		t.Fatal(err)
	}
	start(t, iss, "")
	mint := func() string {
		t.Helper()
		tok, err := iss.Mint(devissuer.Claims{Subject: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first, kid1 := mint(), iss.KeyID()
	mustRotate(t, iss)
	second, kid2 := mint(), iss.KeyID()
	if kid1 == kid2 {
		t.Fatal("Rotate kept the kid")
	}
	for name, tok := range map[string]string{"before rotation": first, "after rotation": second} {
		if _, err := parse(t, iss, tok); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	mustRotate(t, iss)
	if _, err := parse(t, iss, first); err == nil {
		t.Error("a key two rotations old still verifies")
	}
}

func mustRotate(t *testing.T, iss *devissuer.Issuer) {
	t.Helper()
	if err := iss.Rotate(); err != nil {
		t.Fatal(err)
	}
}

func TestSignRaw(t *testing.T) {
	iss, err := devissuer.New("https://issuer.test")
	if err != nil {
		t.Fatal(err)
	}
	claims := iss.BuildClaims(devissuer.Claims{Subject: "s"})

	tok, err := iss.SignRaw(claims, jwt.SigningMethodHS256, iss.PublicKeyPEM(), "some-kid")
	if err != nil {
		t.Fatal(err)
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["alg"] != "HS256" || parsed.Header["kid"] != "some-kid" {
		t.Errorf("header = %v", parsed.Header)
	}
	if !strings.HasPrefix(string(iss.PublicKeyPEM()), "-----BEGIN PUBLIC KEY-----") {
		t.Error("PublicKeyPEM is not a PKIX PEM block")
	}

	none, err := iss.SignRaw(claims, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(none, ".") {
		t.Errorf("alg none token has a signature: %s", none)
	}
}

func TestNewWithAlgRejectsUnknown(t *testing.T) {
	if _, err := devissuer.NewWithAlg("", "HS256"); err == nil {
		t.Error("HS256 accepted")
	}
}

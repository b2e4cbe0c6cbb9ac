package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/devissuer"
)

// TestAuthentication: every API call needs a valid bearer token with the
// right scope; failures carry the RFC 9728 challenge.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("authz", "Authz", "pro")
	mint := func(c devissuer.Claims) string {
		t.Helper()
		tok, err := h.issuer.Mint(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	valid := devissuer.Claims{Subject: "ann", Org: "authz", Scopes: []string{"billing:read", "billing:write"}, Audience: []string{h.url}}
	with := func(change func(*devissuer.Claims)) string {
		c := valid
		change(&c)
		return mint(c)
	}
	metadata := `resource_metadata="` + h.url + `/.well-known/oauth-protected-resource"`
	cases := []struct {
		name, method, path, token string
		status                    int
		code, challenge           string
	}{
		{"no token", "GET", "/api/billing/plans", "", 401, "unauthorized", `Bearer resource_metadata="` + h.url + `/.well-known/oauth-protected-resource", scope="billing:read"`},
		{"garbage token", "GET", "/api/billing/plans", "not-a-jwt", 401, "unauthorized", `error="invalid_token"`},
		{"expired", "GET", "/api/billing/plans", with(func(c *devissuer.Claims) { c.TTL = -time.Minute }), 401, "unauthorized", metadata},
		{"wrong audience", "GET", "/api/billing/plans", with(func(c *devissuer.Claims) { c.Audience = []string{"https://elsewhere.example"} }), 401, "unauthorized", metadata},
		{"MCP audience accepted", "GET", "/api/billing/plans", with(func(c *devissuer.Claims) { c.Audience = []string{h.url + "/mcp"} }), 200, "", ""},
		{"no org claim", "GET", "/api/billing/plans", with(func(c *devissuer.Claims) { c.Org = "" }), 401, "unauthorized", metadata},
		{"read without scope", "GET", "/api/billing/subscription", with(func(c *devissuer.Claims) { c.Scopes = []string{"billing:write"} }), 403, "insufficient_scope", `Bearer error="insufficient_scope", scope="billing:read", ` + metadata},
		{"write without scope", "POST", "/api/billing/upgrade", with(func(c *devissuer.Claims) { c.Scopes = []string{"billing:read"} }), 403, "insufficient_scope", `scope="billing:write"`},
		{"scope prefix trick", "POST", "/api/billing/upgrade", with(func(c *devissuer.Claims) { c.Scopes = []string{"billing:writer", "billing:write:all"} }), 403, "insufficient_scope", ""},
		{"audit without admin", "GET", "/api/billing/audit", mint(valid), 403, "insufficient_scope", `scope="billing:admin"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do(c.method, c.path, c.token, `{"to":"scale"}`)
			if c.method == "GET" {
				r = h.do(c.method, c.path, c.token, nil)
			}
			wantStatus(t, r, c.status, c.code)
			if got := r.Header.Get("WWW-Authenticate"); !strings.Contains(got, c.challenge) {
				t.Fatalf("WWW-Authenticate %q lacks %q", got, c.challenge)
			}
		})
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for path, resource := range map[string]string{
		"/.well-known/oauth-protected-resource":     h.url,
		"/.well-known/oauth-protected-resource/mcp": h.url + "/mcp",
	} {
		r := h.do("GET", path, "", nil)
		wantStatus(t, r, http.StatusOK, "")
		var md struct {
			Resource               string   `json:"resource"`
			AuthorizationServers   []string `json:"authorization_servers"`
			ScopesSupported        []string `json:"scopes_supported"`
			BearerMethodsSupported []string `json:"bearer_methods_supported"`
		}
		r.decode(t, &md)
		if md.Resource != resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != h.issuer.IssuerURL() ||
			len(md.ScopesSupported) != 3 || len(md.BearerMethodsSupported) != 1 || md.BearerMethodsSupported[0] != "header" {
			t.Fatalf("%s: %s", path, r.Body)
		}
	}
}

// TestKeyRotation: the issuer rotates its signing key and billingd accepts
// tokens signed with the new key without a restart.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("rot", "Rot", "pro")
	wantStatus(t, h.do("GET", "/api/billing/plans", h.user("rot", "ron"), nil), http.StatusOK, "")
	if err := h.issuer.Rotate(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, h.do("GET", "/api/billing/plans", h.user("rot", "ron"), nil), http.StatusOK, "")
}

// TestInvisibleIdentityRefused: the token of issue 12, whose sub
// "\u202enimda-omed" displays as "demo-admin" and whose azp
// "\u200bdemo-agent" as "demo-agent", is refused like an invalid token on
// REST and on /mcp, so it can never reach an approval page or the audit log
// (contract §4).
func TestInvisibleIdentityRefused(t *testing.T) {
	h := newHarness(t)
	h.createOrg("ghost", "Ghost", "pro")
	forged := mint(t, h, devissuer.Claims{Subject: "\u202enimda-omed", Org: "ghost", Client: "\u200bdemo-agent",
		Scopes: []string{"billing:read", "billing:write", "billing:admin"}, Audience: []string{h.url, h.url + "/mcp"}})
	r := h.do("POST", "/api/billing/upgrade", forged, `{"to":"scale"}`)
	wantStatus(t, r, http.StatusUnauthorized, "unauthorized")
	if !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("challenge %q", r.Header.Get("WWW-Authenticate"))
	}
	if r := h.mcpPost("", forged, initializeRequest); r.Status != http.StatusUnauthorized {
		t.Fatalf("/mcp answered %d: %s", r.Status, r.Body)
	}
	// A visible look-alike (a Cyrillic а) is refused the same way, over
	// REST and /mcp (issue 23).
	lookAlike := mint(t, h, devissuer.Claims{Subject: "demo-аdmin", Org: "ghost", Client: "demo-agent",
		Scopes: []string{"billing:read", "billing:write", "billing:admin"}, Audience: []string{h.url, h.url + "/mcp"}})
	wantStatus(t, h.do("POST", "/api/billing/upgrade", lookAlike, `{"to":"scale"}`), http.StatusUnauthorized, "unauthorized")
	if r := h.mcpPost("", lookAlike, initializeRequest); r.Status != http.StatusUnauthorized {
		t.Fatalf("/mcp answered a look-alike %d: %s", r.Status, r.Body)
	}
	for _, e := range h.auditEvents("ghost") {
		t.Fatalf("the forged token left an audit event: %+v", e)
	}
}

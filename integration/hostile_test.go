package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/internal/devissuer"
)

// hostileCase is one request a buggy or hostile client might send.
type hostileCase struct {
	name   string
	method string
	path   string
	auth   string // the whole Authorization header; "" for none
	body   string
	status int
	code   string
}

// TestHostileInput sends malformed, oversized, forged and tricky requests.
// Each gets the contract's error code, and the state of orgs, subscriptions
// and confirmations is the same afterwards (the audit log may gain
// TOKEN_REJECTED rows: recording refusals is its job).
func TestHostileInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("target", "Target", "pro")
	h.createOrg("victim", "Victim", "pro")
	bearer := "Bearer " + h.user("target", "tess")
	victimToken := h.propose(h.user("victim", "vic"), "upgrade", "scale").ConfirmToken
	own := h.propose(h.user("target", "tess"), "upgrade", "scale")

	cases := append(append(append(bodyCases(bearer), tokenCases(bearer, victimToken)...),
		jwtCases(t, h)...), pathAndQueryCases(bearer)...)
	if len(cases) < 60 {
		t.Fatalf("only %d hostile cases", len(cases))
	}
	t.Logf("%d hostile cases", len(cases))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.stateDigest()
			req, err := http.NewRequest(c.method, h.url+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			req.Header.Set("Content-Type", "application/json")
			r := h.offSpec().send(req) // malformed on purpose: only the answer is validated
			wantStatus(t, r, c.status, c.code)
			if strings.Contains(string(r.Body), "pbc_") || strings.Contains(string(r.Body), "SQLSTATE") {
				t.Fatalf("response leaks: %s", r.Body)
			}
			if after := h.stateDigest(); after != before {
				t.Fatal("the database changed")
			}
		})
	}
	// The owner's token survived everything above.
	wantStatus(t, h.confirm(h.user("target", "tess"), "upgrade", "scale", own.ConfirmToken), http.StatusOK, "")
}

func bodyCases(auth string) []hostileCase {
	up := func(name, body string, status int, code string) hostileCase {
		return hostileCase{name, "POST", "/api/billing/upgrade", auth, body, status, code}
	}
	bad := func(name, body string) hostileCase { return up(name, body, 400, "invalid_request") }
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	return []hostileCase{
		bad("empty body", ``),
		bad("whitespace body", "  \n\t "),
		bad("null", `null`),
		bad("array", `[{"to":"scale"}]`),
		bad("string", `"scale"`),
		bad("number", `42`),
		bad("truncated object", `{"to":"scale"`),
		bad("single quotes", `{'to':'scale'}`),
		bad("trailing comma", `{"to":"scale",}`),
		bad("comment", `{"to":"scale" /* x */}`),
		bad("two objects", `{"to":"scale"}{"to":"free"}`),
		bad("trailing garbage", `{"to":"scale"} x`),
		bad("to as number", `{"to":1}`),
		bad("to as array", `{"to":["scale"]}`),
		bad("to as object", `{"to":{"id":"scale"}}`),
		bad("to as null", `{"to":null}`),
		bad("to as bool", `{"to":true}`),
		bad("token as number", `{"to":"scale","confirm_token":123}`),
		bad("unknown field", `{"to":"scale","force":true}`),
		bad("unknown field amount", `{"to":"scale","amount_cents":1}`),
		bad("key in other case", `{"TO":"scale"}`),
		bad("repeated key", `{"to":"free","to":"scale"}`),
		bad("deep nesting", `{"to":`+deep+`}`),
		bad("missing to", `{}`),
		bad("empty to", `{"to":""}`),
		bad("invalid UTF-8 in to", "{\"to\":\"sc\xffale\"}"),
		bad("control character in to", `{"to":"sca\u0000le"}`),
		bad("zero-width space in to", `{"to":"sca\u200ble"}`),
		bad("right-to-left override in to", `{"to":"\u202eelacs"}`),
		bad("SQL in to", `{"to":"scale'; DROP TABLE confirmations; --"}`),
		bad("SQL boolean in to", `{"to":"x' OR '1'='1"}`),
		bad("path traversal in to", `{"to":"../../etc/passwd"}`),
		bad("upper-case plan", `{"to":"SCALE"}`),
		bad("65-character plan", `{"to":"`+strings.Repeat("a", 65)+`"}`),
		up("unknown plan", `{"to":"enterprise"}`, 422, "unknown_plan"),
		up("body over 64 KiB", `{"to":"`+strings.Repeat("s", 65<<10)+`"}`, 413, "request_too_large"),
		up("huge body of whitespace", strings.Repeat(" ", 200<<10), 413, "request_too_large"),
	}
}

func tokenCases(auth, othersToken string) []hostileCase {
	confirm := func(name, token string) hostileCase {
		body, _ := json.Marshal(map[string]string{"to": "scale", "confirm_token": token})
		return hostileCase{name, "POST", "/api/billing/upgrade", auth, string(body), 409, "consent_token_invalid"}
	}
	return []hostileCase{
		confirm("token of 81 characters", "pbc_"+strings.Repeat("A", 77)),
		confirm("token of 10000 characters", "pbc_"+strings.Repeat("A", 10000)),
		confirm("token with the wrong prefix", "pbx_"+strings.Repeat("A", 43)),
		confirm("token without prefix", strings.Repeat("A", 47)),
		confirm("prefix only", "pbc_"),
		confirm("token with padding", "pbc_"+strings.Repeat("A", 42)+"="),
		confirm("token with a space", "pbc_"+strings.Repeat("A", 21)+" "+strings.Repeat("A", 21)),
		confirm("token with unicode", "pbc_"+strings.Repeat("Ä", 21)),
		confirm("token with SQL", "pbc_' OR '1'='1' --"),
		confirm("token with a NUL", "pbc_"+strings.Repeat("A", 20)+"\x00"+strings.Repeat("A", 22)),
		confirm("well-formed unknown token", "pbc_"+strings.Repeat("A", 43)),
		confirm("another org's valid token", othersToken),
		confirm("the hash of a token", hexSHA256(othersToken)),
	}
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func jwtCases(t *testing.T, h *harness) []hostileCase {
	t.Helper()
	valid := devissuer.Claims{Subject: "tess", Org: "target", Scopes: []string{"billing:read", "billing:write"}, Audience: []string{h.url}}
	mint := func(change func(*devissuer.Claims)) string {
		c := valid
		change(&c)
		tok, err := h.issuer.Mint(c)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	raw := func(change func(jwt.MapClaims), method jwt.SigningMethod, key any) string {
		claims := h.issuer.BuildClaims(valid)
		change(claims)
		tok, err := h.issuer.SignRaw(claims, method, key, h.issuer.KeyID())
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	same := func(jwt.MapClaims) {}
	unauthorized := func(name, auth string) hostileCase {
		return hostileCase{name, "POST", "/api/billing/upgrade", auth, `{"to":"scale"}`, 401, "unauthorized"}
	}
	forbidden := func(name, auth string) hostileCase {
		return hostileCase{name, "POST", "/api/billing/upgrade", auth, `{"to":"scale"}`, 403, "insufficient_scope"}
	}
	return []hostileCase{
		unauthorized("no Authorization header", ""),
		unauthorized("empty bearer", "Bearer "),
		unauthorized("Basic scheme", "Basic dGVzczpwYXNz"),
		unauthorized("not a JWT", "Bearer hello"),
		unauthorized("JWT with trailing garbage", mint(func(*devissuer.Claims) {})+"x"),
		unauthorized("alg none", raw(same, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType)),
		unauthorized("HS256 signed with the public key", raw(same, jwt.SigningMethodHS256, h.issuer.PublicKeyPEM())),
		unauthorized("expired", mint(func(c *devissuer.Claims) { c.TTL = -time.Minute })),
		unauthorized("no exp", mint(func(c *devissuer.Claims) { c.Extra = map[string]any{"exp": nil} })),
		unauthorized("nbf in the future", mint(func(c *devissuer.Claims) { c.Extra = map[string]any{"nbf": time.Now().Add(time.Hour).Unix()} })),
		unauthorized("wrong iss", mint(func(c *devissuer.Claims) { c.Extra = map[string]any{"iss": "https://evil.example"} })),
		unauthorized("wrong aud", mint(func(c *devissuer.Claims) { c.Audience = []string{"https://evil.example"} })),
		unauthorized("no aud", mint(func(c *devissuer.Claims) { c.Audience = nil })),
		unauthorized("missing org claim", mint(func(c *devissuer.Claims) { c.Org = "" })),
		unauthorized("org claim as number", mint(func(c *devissuer.Claims) { c.Extra = map[string]any{"org_id": 7} })),
		unauthorized("missing sub", mint(func(c *devissuer.Claims) { c.Subject = "" })),
		unauthorized("sub with a NUL", mint(func(c *devissuer.Claims) { c.Subject = "tess\x00admin" })),
		unauthorized("sub with a newline", mint(func(c *devissuer.Claims) { c.Subject = "tess\nlevel=ERROR" })),
		{"token in the query string", "POST", "/api/billing/upgrade?access_token=" +
			strings.TrimPrefix(mint(func(*devissuer.Claims) {}), "Bearer "), "", `{"to":"scale"}`, 401, "unauthorized"},
		forbidden("scope prefix", mint(func(c *devissuer.Claims) { c.Scopes = []string{"billing:writ"} })),
		forbidden("scope suffix", mint(func(c *devissuer.Claims) { c.Scopes = []string{"billing:write:all"} })),
		forbidden("scope in upper case", mint(func(c *devissuer.Claims) { c.Scopes = []string{"BILLING:WRITE"} })),
		forbidden("admin without write", mint(func(c *devissuer.Claims) { c.Scopes = []string{"billing:admin"} })),
		forbidden("scopes joined by a comma", mint(func(c *devissuer.Claims) { c.Scopes = []string{"billing:read,billing:write"} })),
		forbidden("wildcard scope", mint(func(c *devissuer.Claims) { c.Scopes = []string{"billing:*"} })),
	}
}

func pathAndQueryCases(auth string) []hostileCase {
	cancel := func(name, id string) hostileCase {
		return hostileCase{name, "POST", "/api/billing/confirmations/" + id + "/cancel", auth, ``, 404, "not_found"}
	}
	audit := func(name, query string) hostileCase {
		return hostileCase{name, "GET", "/api/billing/audit?" + query, auth, ``, 403, "insufficient_scope"}
	}
	return []hostileCase{
		cancel("cancel with path traversal", "..%2F..%2Fetc%2Fpasswd"),
		cancel("cancel with dot segments", "%2e%2e"),
		cancel("cancel with SQL", "cfm_'%20OR%20'1'='1"),
		cancel("cancel with a very long id", "cfm_"+strings.Repeat("a", 5000)),
		cancel("cancel with unicode", "cfm_%C3%A4%C3%A4"),
		cancel("cancel with a NUL", "cfm_%00"),
		{"cancel with a body field", "POST", "/api/billing/confirmations/cfm_x/cancel", auth, `{"all":true}`, 400, "invalid_request"},
		{"upgrade with GET", "GET", "/api/billing/upgrade", auth, ``, 400, "invalid_request"},
		{"unknown endpoint", "POST", "/api/billing/refund", auth, `{}`, 404, "not_found"},
		{"encoded path", "POST", "/api/billing/%75pgrade", auth, `{"to":"scale"}`, 404, "not_found"},
		audit("audit without admin", "limit=10"),
	}
}

// stateDigest fingerprints everything a request could change besides the
// audit log.
func (h *harness) stateDigest() string {
	h.t.Helper()
	var digest string
	err := h.db.Pool.QueryRow(context.Background(), `SELECT md5(
		coalesce((SELECT string_agg(o::text, ',' ORDER BY o.id) FROM orgs o), '') ||
		coalesce((SELECT string_agg(s::text, ',' ORDER BY s.org) FROM subscriptions s), '') ||
		coalesce((SELECT string_agg(c::text, ',' ORDER BY c.id) FROM confirmations c), ''))`).Scan(&digest)
	if err != nil {
		h.t.Fatal(err)
	}
	return digest
}

package devissuer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The issuer is also a minimal OpenID provider, DEVELOPMENT ONLY, so that
// billingd dev and the tests can sign people in on billingd's pages with the
// real protocol (authorization code + PKCE, ID token with nonce and
// auth_time): /authorize shows a login page on which one chooses a demo user
// (no password: whoever reaches the loopback port is anyone they like), and
// /token exchanges the code. It accepts only loopback redirect URIs. Like a
// real provider's consent, it grants only the scopes the client asked for
// (those of them the user has), and the audience asked for with resource
// (RFC 8707) or audience (ORY Hydra, Auth0).

// User is a demo person the login page offers.
type User struct {
	Subject string
	Org     string
	Scopes  []string
	Label   string // shown on the login page
}

const (
	authorizePath = "/authorize"
	tokenPath     = "/token"
	codeTTL       = time.Minute
	// SignInTokenTTL is the lifetime of access and ID tokens issued by /token.
	SignInTokenTTL = time.Hour
	// StrongACR is the acr of a sign-in made with "use a passkey" ticked on
	// the login page, for demonstrating VERIFY_ACR_VALUES.
	StrongACR = "urn:billingd:dev:passkey"
	// PasswordACR is the acr of any other sign-in.
	PasswordACR = "urn:billingd:dev:password"
)

// grant is an issued authorization code.
type grant struct {
	clientID, redirectURI, challenge, nonce, resource string
	user                                              User
	scopes                                            []string // granted: requested ∩ the user's
	authTime                                          time.Time
	acr                                               string
	expires                                           time.Time
}

// SetUsers replaces the demo users of the login page.
func (i *Issuer) SetUsers(users ...User) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.users = slices.Clone(users)
}

// SetDefaultAudience sets the aud of access tokens issued by /token when the
// request names no resource.
func (i *Issuer) SetDefaultAudience(aud string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.defaultAudience = aud
}

func (i *Issuer) user(subject string) (User, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	for _, u := range i.users {
		if u.Subject == subject {
			return u, true
		}
	}
	return User{}, false
}

// authRequest is a validated authorization request.
type authRequest struct {
	ClientID, RedirectURI, State, Nonce, Challenge, Resource, Scope, Prompt, MaxAge, ACRValues string
}

func readAuthRequest(form url.Values) (authRequest, string) {
	r := authRequest{ClientID: form.Get("client_id"), RedirectURI: form.Get("redirect_uri"), State: form.Get("state"),
		Nonce: form.Get("nonce"), Challenge: form.Get("code_challenge"), Resource: form.Get("resource"),
		Scope: form.Get("scope"), Prompt: form.Get("prompt"), MaxAge: form.Get("max_age"), ACRValues: form.Get("acr_values")}
	if r.Resource == "" {
		r.Resource = form.Get("audience")
	}
	switch {
	case form.Get("response_type") != "code":
		return r, "response_type must be code"
	case r.ClientID == "" || r.State == "" || r.Nonce == "":
		return r, "client_id, state and nonce are required"
	case form.Get("code_challenge_method") != "S256" || r.Challenge == "":
		return r, "PKCE with S256 is required"
	case !loopbackURL(r.RedirectURI):
		return r, "redirect_uri must be a loopback http(s) address (development only)"
	}
	return r, ""
}

func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// serveAuthorize shows the login page (GET) and, when a user is chosen
// (POST), redirects back with a code.
func (i *Issuer) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	req, problem := readAuthRequest(r.Form)
	if problem != "" {
		http.Error(w, problem, http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodGet {
		i.mu.RLock()
		users := slices.Clone(i.users)
		i.mu.RUnlock()
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = loginPage.Execute(w, struct {
			Req   authRequest
			Users []User
			Fresh bool
			CSRF  string
		}{req, users, req.Prompt == "login" || req.MaxAge == "0", i.formToken(req)})
		return
	}
	// The login page's form, and only it, may choose a user: a cross-site
	// form post (Sec-Fetch-Site, Origin) is refused, and the form carries a
	// token bound to this authorization request that only the page knows.
	if err := i.crossOrigin.Check(r); err != nil ||
		subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf_token")), []byte(i.formToken(req))) != 1 {
		http.Error(w, "this form did not come from the issuer's login page", http.StatusForbidden)
		return
	}
	user, ok := i.user(r.PostForm.Get("user"))
	if !ok {
		http.Error(w, "choose a demo user", http.StatusBadRequest)
		return
	}
	acr := PasswordACR
	if r.PostForm.Get("passkey") == "on" {
		acr = StrongACR
	}
	code := rand.Text()
	i.mu.Lock()
	if i.grants == nil {
		i.grants = map[string]grant{}
	}
	i.grants[code] = grant{clientID: req.ClientID, redirectURI: req.RedirectURI, challenge: req.Challenge, nonce: req.Nonce,
		resource: req.Resource, user: user, scopes: granted(user.Scopes, req.Scope), authTime: time.Now(), acr: acr,
		expires: time.Now().Add(codeTTL)}
	i.mu.Unlock()
	back, _ := url.Parse(req.RedirectURI)
	q := back.Query()
	q.Set("code", code)
	q.Set("state", req.State)
	q.Set("iss", i.IssuerURL())
	back.RawQuery = q.Encode()
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

// formToken is the login form's CSRF token for an authorization request:
// an HMAC of the request under a key of this process.
func (i *Issuer) formToken(req authRequest) string {
	i.formKeyOnce.Do(func() { i.formKey = []byte(rand.Text()) })
	mac := hmac.New(sha256.New, i.formKey)
	for _, f := range []string{req.ClientID, req.RedirectURI, req.State, req.Nonce, req.Challenge, req.Resource, req.Scope,
		req.Prompt, req.MaxAge, req.ACRValues} {
		mac.Write([]byte(f))
		mac.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// serveToken exchanges a code (once) for an access token and an ID token.
func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		tokenError(w, "unsupported_grant_type")
		return
	}
	clientID := r.PostForm.Get("client_id")
	if id, _, ok := r.BasicAuth(); ok {
		clientID, _ = url.QueryUnescape(id)
	}
	code := r.PostForm.Get("code")
	i.mu.Lock()
	g, ok := i.grants[code]
	delete(i.grants, code) // single use, whatever happens next
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	if !ok || time.Now().After(g.expires) || g.clientID != clientID || g.redirectURI != r.PostForm.Get("redirect_uri") ||
		subtle.ConstantTimeCompare([]byte(challenge), []byte(g.challenge)) != 1 {
		tokenError(w, "invalid_grant")
		return
	}
	access, idToken, err := i.signInTokens(g)
	if err != nil {
		http.Error(w, "cannot sign tokens", http.StatusInternalServerError)
		return
	}
	writeJSON(w, map[string]any{"access_token": access, "id_token": idToken, "token_type": "Bearer",
		"expires_in": int(SignInTokenTTL.Seconds()), "scope": strings.Join(append([]string{"openid"}, g.scopes...), " ")})
}

// granted is what consent grants: the scopes requested (space-separated)
// that the user has, never one nobody asked for.
func granted(has []string, requested string) []string {
	var out []string
	for _, s := range strings.Fields(requested) {
		if slices.Contains(has, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// signInTokens are the access token (for billingd's API, azp the client)
// and the ID token (aud the client) of a grant.
func (i *Issuer) signInTokens(g grant) (string, string, error) {
	aud := g.resource
	if aud == "" {
		i.mu.RLock()
		aud = i.defaultAudience
		i.mu.RUnlock()
	}
	authTime := g.authTime.Unix()
	access, err := i.Mint(Claims{Subject: g.user.Subject, Org: g.user.Org, Client: g.clientID, Scopes: g.scopes,
		Audience: []string{aud}, TTL: SignInTokenTTL, Extra: map[string]any{"auth_time": authTime, "acr": g.acr}})
	if err != nil {
		return "", "", err
	}
	idToken, err := i.Mint(Claims{Subject: g.user.Subject, Audience: []string{g.clientID}, TTL: SignInTokenTTL,
		Extra: map[string]any{"nonce": g.nonce, "auth_time": authTime, "acr": g.acr, "azp": g.clientID}})
	return access, idToken, err
}

func tokenError(w http.ResponseWriter, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(`{"error":"` + code + `"}`))
}

// MintIDToken signs an ID token with arbitrary claims, for tests of a
// relying party's checks.
func (i *Issuer) MintIDToken(claims jwt.MapClaims) (string, error) {
	i.mu.RLock()
	key := i.current
	i.mu.RUnlock()
	return i.SignRaw(claims, key.method, key.priv, key.kid)
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Dev sign-in · DEVELOPMENT ONLY</title>
<style>body{font-family:sans-serif;max-width:40em;margin:2em auto}.warn{background:#fee;border:2px solid #c00;padding:.5em 1em}
button{display:block;margin:.5em 0;padding:.5em 1em;font-size:1em}</style></head>
<body>
<p class="warn"><strong>DEVELOPMENT ONLY.</strong> This is billingd dev's token issuer on a loopback port: it signs
anyone in as any demo user, without a password. Never use it for anything real.</p>
<h1>Sign in as a demo user</h1>
{{if .Fresh}}<p id="fresh">The application asked you to authenticate again (max_age=0, prompt=login).</p>{{end}}
<form method="post">
<input type="hidden" name="response_type" value="code">
<input type="hidden" name="client_id" value="{{.Req.ClientID}}">
<input type="hidden" name="redirect_uri" value="{{.Req.RedirectURI}}">
<input type="hidden" name="state" value="{{.Req.State}}">
<input type="hidden" name="nonce" value="{{.Req.Nonce}}">
<input type="hidden" name="code_challenge" value="{{.Req.Challenge}}">
<input type="hidden" name="code_challenge_method" value="S256">
<input type="hidden" name="resource" value="{{.Req.Resource}}">
<input type="hidden" name="scope" value="{{.Req.Scope}}">
<input type="hidden" name="prompt" value="{{.Req.Prompt}}">
<input type="hidden" name="max_age" value="{{.Req.MaxAge}}">
<input type="hidden" name="acr_values" value="{{.Req.ACRValues}}">
<input type="hidden" name="csrf_token" value="{{.CSRF}}">
<p><label><input type="checkbox" name="passkey" id="passkey"> Use a passkey (acr {{"urn:billingd:dev:passkey"}})</label></p>
{{range .Users}}<button type="submit" name="user" value="{{.Subject}}" id="user-{{.Subject}}">{{.Subject}}{{if .Label}} — {{.Label}}{{end}}</button>
{{else}}<p>No demo users are configured.</p>{{end}}
</form>
</body></html>
`))

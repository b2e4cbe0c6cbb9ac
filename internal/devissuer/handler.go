package devissuer

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/MicahParks/jwkset"
)

const (
	jwksPath         = "/jwks.json"
	oauthMetadataDoc = "/.well-known/oauth-authorization-server"
	openIDConfigDoc  = "/.well-known/openid-configuration"
)

// metadata is the subset of RFC 8414 / OpenID Connect Discovery a resource
// server needs to verify tokens and a relying party needs to sign people in
// (authorize.go).
type metadata struct {
	Issuer                   string   `json:"issuer"`
	JWKSURI                  string   `json:"jwks_uri"`
	AuthorizationEndpoint    string   `json:"authorization_endpoint"`
	TokenEndpoint            string   `json:"token_endpoint"`
	ResponseTypes            []string `json:"response_types_supported"`
	SubjectTypes             []string `json:"subject_types_supported"`
	IDTokenAlgs              []string `json:"id_token_signing_alg_values_supported"`
	CodeChallengeMethods     []string `json:"code_challenge_methods_supported"`
	GrantTypes               []string `json:"grant_types_supported"`
	TokenEndpointAuthMethods []string `json:"token_endpoint_auth_methods_supported"`
}

// Handler serves the issuer's metadata and JWK Set. Mount it at the root of
// the issuer URL's host. When the issuer URL has a path (http://h/tenant),
// every address the discovery specs allow is served: the RFC 8414 form with
// the path inserted (/.well-known/oauth-authorization-server/tenant), the
// OpenID forms with the path inserted or appended, and /tenant/jwks.json.
// Paths are resolved per request, so SetIssuerURL may be called after the
// server starts.
func (i *Issuer) Handler() http.Handler {
	return http.HandlerFunc(i.serveHTTP)
}

func (i *Issuer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	issuer := i.IssuerURL()
	// DNS rebinding: a page of evil.example whose name now resolves to
	// 127.0.0.1 reaches this port as a same-origin script, with Host
	// evil.example. Only the issuer's own host and loopback names are
	// answered.
	if !allowedHost(r.Host, issuer) {
		http.Error(w, "this development issuer answers only on its loopback address", http.StatusMisdirectedRequest)
		return
	}
	base := issuerPath(issuer)
	switch {
	case r.URL.Path == base+authorizePath && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		i.serveAuthorize(w, r)
		return
	case r.URL.Path == base+tokenPath && r.Method == http.MethodPost:
		i.serveToken(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case oauthMetadataDoc + base, openIDConfigDoc + base, base + openIDConfigDoc:
		writeJSON(w, metadata{Issuer: issuer, JWKSURI: issuer + jwksPath,
			AuthorizationEndpoint: issuer + authorizePath, TokenEndpoint: issuer + tokenPath,
			ResponseTypes: []string{"code"}, SubjectTypes: []string{"public"}, IDTokenAlgs: []string{i.alg},
			CodeChallengeMethods: []string{"S256"}, GrantTypes: []string{"authorization_code"},
			TokenEndpointAuthMethods: []string{"none", "client_secret_basic", "client_secret_post"}})
	case base + jwksPath:
		i.serveJWKS(w)
	default:
		http.NotFound(w, r)
	}
}

func (i *Issuer) serveJWKS(w http.ResponseWriter) {
	set, err := i.publicJWKS()
	if err != nil {
		http.Error(w, "cannot encode keys", http.StatusInternalServerError)
		return
	}
	writeJSON(w, set)
}

// publicJWKS publishes the current key and the one retired by the last
// Rotate, public parts only.
func (i *Issuer) publicJWKS() (jwkset.JWKSMarshal, error) {
	i.mu.RLock()
	keys := []signingKey{i.current}
	if i.previous != nil {
		keys = append(keys, *i.previous)
	}
	i.mu.RUnlock()

	set := jwkset.JWKSMarshal{Keys: make([]jwkset.JWKMarshal, 0, len(keys))}
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{
				ALG: jwkset.ALG(k.method.Alg()),
				KID: k.kid,
				USE: jwkset.UseSig,
			},
		})
		if err != nil {
			return jwkset.JWKSMarshal{}, fmt.Errorf("devissuer: encode key %s: %w", k.kid, err)
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	return set, nil
}

// allowedHost reports whether a request's Host names the issuer: its URL's
// host, or a loopback name (localhost, 127.0.0.0/8, ::1) with any port.
func allowedHost(host, issuer string) bool {
	if u, err := url.Parse(issuer); err == nil && u.Host != "" && strings.EqualFold(host, u.Host) {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// issuerPath is the path component of the issuer URL, "" for a bare origin.
func issuerPath(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return ""
	}
	return u.Path
}

func writeJSON(w http.ResponseWriter, v any) {
	// no-store: a verifier refreshing after Rotate must see the new key, not a
	// cached set.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

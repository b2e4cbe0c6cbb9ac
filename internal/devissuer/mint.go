package devissuer

import (
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims describes the access token to mint. Empty fields are left out of the
// token, except TTL, which defaults to DefaultTTL.
type Claims struct {
	Subject  string   // sub
	Org      string   // the Issuer's OrgClaim (default org_id)
	Client   string   // azp
	Scopes   []string // scope, space-separated
	Audience []string // aud
	// TTL sets exp to now+TTL. Zero means DefaultTTL; a negative TTL mints a
	// token that has already expired.
	TTL time.Duration
	// Extra is applied last: each entry adds or replaces a claim, and an entry
	// whose value is nil removes the claim (Extra{"exp": nil} mints a token
	// without an expiry).
	Extra map[string]any
}

// Mint signs c with the current key. The token carries iss, iat, nbf, exp and
// a random jti besides what c asks for.
func (i *Issuer) Mint(c Claims) (string, error) {
	i.mu.RLock()
	key := i.current
	i.mu.RUnlock()
	return i.SignRaw(i.BuildClaims(c), key.method, key.priv, key.kid)
}

// BuildClaims returns the claim set Mint would sign for c, for tests that
// sign it some other way with SignRaw.
func (i *Issuer) BuildClaims(c Claims) jwt.MapClaims {
	now := time.Now()
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	// Times are float64, the type JSON decoding yields, so that the
	// MapClaims getters (GetExpirationTime…) work on the unsigned claims too.
	claims := jwt.MapClaims{
		"iss": i.IssuerURL(),
		"iat": float64(now.Unix()),
		"nbf": float64(now.Unix()),
		"exp": float64(now.Add(ttl).Unix()),
		"jti": rand.Text(),
	}
	setIf(claims, "sub", c.Subject)
	setIf(claims, i.orgClaim(), c.Org)
	setIf(claims, "azp", c.Client)
	setIf(claims, "scope", strings.Join(c.Scopes, " "))
	if len(c.Audience) > 0 {
		claims["aud"] = c.Audience
	}
	applyExtra(claims, c.Extra)
	return claims
}

// SignRaw signs arbitrary claims with an arbitrary method and key, setting
// the kid header when kid is non-empty. It exists so tests can build tokens a
// well-behaved issuer never would: alg "none" (key
// jwt.UnsafeAllowNoneSignatureType), HS256 keyed with PublicKeyPEM, a kid the
// JWKS does not publish.
func (i *Issuer) SignRaw(claims jwt.MapClaims, method jwt.SigningMethod, key any, kid string) (string, error) {
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("devissuer: sign %s token: %w", method.Alg(), err)
	}
	return s, nil
}

func (i *Issuer) orgClaim() string {
	if i.OrgClaim == "" {
		return DefaultOrgClaim
	}
	return i.OrgClaim
}

// setIf sets claim name to v unless v is empty, so that tests can mint tokens
// lacking a claim simply by leaving the field empty.
func setIf(claims jwt.MapClaims, name, v string) {
	if v != "" {
		claims[name] = v
	}
}

func applyExtra(claims jwt.MapClaims, extra map[string]any) {
	for name, v := range extra {
		if v == nil {
			delete(claims, name)
			continue
		}
		claims[name] = v
	}
}

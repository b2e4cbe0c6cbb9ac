package auth

import (
	"context"
	"crypto"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// Identity is the verified caller.
type Identity struct {
	Subject string // sub: the principal
	Org     string // the configured org claim
	Client  string // azp or client_id (equal when both are present), else ""
	// OnBehalf: the token names an actor (RFC 8693 act): another party,
	// an agent that exchanged a person's token, acts on sub's behalf.
	// Such a call is never a person's own, whatever its client
	// (contract §4; billing.Caller.Agent).
	OnBehalf bool
	Scopes   []string  // from scope, else scp
	Expiry   time.Time // exp
	// AuthTime is when the person last authenticated at the issuer
	// (auth_time, RFC 9470); zero when the token does not say.
	AuthTime time.Time
	// ACR is the authentication context class of that authentication (acr),
	// e.g. a phishing-resistant method; "" when the token does not say.
	ACR string
}

// HasScope reports whether the token was granted exactly scope s. There is no
// prefix matching or hierarchy: "billing:writer" does not grant
// "billing:write", and ScopeAdmin grants only itself.
func (i Identity) HasScope(s string) bool {
	return slices.Contains(i.Scopes, s)
}

// tokenError is a rejection: a fixed, log-safe reason, plus the library error
// behind it for errors.Is (e.g. jwt.ErrTokenExpired). Error() shows only the
// reason because library messages can quote header values the caller chose.
type tokenError struct {
	reason string
	cause  error
}

func (e *tokenError) Error() string        { return ErrInvalidToken.Error() + ": " + e.reason }
func (e *tokenError) Is(target error) bool { return target == ErrInvalidToken }
func (e *tokenError) Unwrap() error        { return e.cause }

func reject(reason string, cause error) error {
	return &tokenError{reason: reason, cause: cause}
}

// Verify checks raw (the bearer token, without "Bearer ") and returns the
// identity it carries. ctx bounds the JWKS refresh an unknown kid may trigger.
// Every error wraps ErrInvalidToken.
func (v *Verifier) Verify(ctx context.Context, raw string) (Identity, error) {
	if raw == "" {
		return Identity{}, reject("empty", nil)
	}
	if len(raw) > MaxTokenLength {
		return Identity{}, reject("too long", nil)
	}
	now := time.Now()
	if e, ok := v.verified.get(raw, now); ok {
		served, err := v.stillServed(ctx, e.kid, e.key)
		if err != nil {
			v.verified.remove(raw)
			return Identity{}, reject("unknown signing key", err)
		}
		if served {
			return e.id, nil
		}
		v.verified.remove(raw) // the kid now names another key: check in full
	}
	claims := jwt.MapClaims{}
	var kid string
	var key crypto.PublicKey
	keys := v.keys.KeyfuncCtx(ctx)
	capture := func(t *jwt.Token) (any, error) {
		k, err := keys(t)
		s, hasKID := t.Header["kid"].(string)
		// A kid-less token gets a jwt.VerificationKeySet: not cached.
		if _, isSet := k.(jwt.VerificationKeySet); err == nil && hasKID && !isSet {
			kid, key = s, k
		}
		return k, err
	}
	if _, err := jwt.ParseWithClaims(raw, claims, capture, v.options...); err != nil {
		return Identity{}, reject(parseFailure(err, claims), err)
	}
	if err := v.checkIssuer(claims); err != nil {
		return Identity{}, err
	}
	id, err := v.identity(claims)
	if err == nil {
		v.verified.put(raw, kid, key, id, v.notBefore(claims), now)
	}
	return id, err
}

// notBefore is the earliest moment jwt accepts claims' nbf at (nbf less
// the leeway), zero when the token has none.
func (v *Verifier) notBefore(claims jwt.MapClaims) time.Time {
	nbf, err := claims.GetNotBefore()
	if err != nil || nbf == nil {
		return time.Time{}
	}
	return nbf.Add(-v.leeway)
}

// stillServed reports whether the issuer's key set, as billingd last
// fetched it, still holds key under kid: a remembered token counts only
// then. A kid no longer in the set is an error (what a full check would
// answer, after the same refresh of the set).
func (v *Verifier) stillServed(ctx context.Context, kid string, key crypto.PublicKey) (bool, error) {
	jwk, err := v.keys.Storage().KeyRead(ctx, kid)
	if err != nil {
		return false, err
	}
	pub, ok := jwk.Key().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key), nil
}

// checkIssuer requires iss, from the configured issuer by SameIssuer (the
// rule discovery and ID tokens follow too).
func (v *Verifier) checkIssuer(claims jwt.MapClaims) error {
	raw, present := claims["iss"]
	iss, ok := raw.(string)
	switch {
	case !present:
		return reject("missing iss", jwt.ErrTokenRequiredClaimMissing)
	case !ok:
		return reject("malformed claim", jwt.ErrInvalidType)
	case !SameIssuer(iss, v.issuer):
		return reject("wrong issuer", jwt.ErrTokenInvalidIssuer)
	}
	return nil
}

// parseFailure names why jwt rejected a token. The order matters: jwt joins
// every failed claim check, and the first cause found here is the one logged.
func parseFailure(err error, claims jwt.MapClaims) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwkset.ErrKeyNotFound):
		return "unknown signing key"
	case errors.Is(err, keyfunc.ErrKeyfunc):
		return "no usable signing key"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable (algorithm or key)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// Also where WithValidMethods reports a disallowed alg (none, HS*).
		return "bad signature or disallowed algorithm"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "missing " + missingClaim(claims)
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrInvalidType):
		return "malformed claim"
	default:
		return "rejected"
	}
}

// missingClaim names the required registered claim absent from claims; jwt
// only says that one is.
func missingClaim(claims jwt.MapClaims) string {
	for _, name := range []string{"exp", "iss", "aud"} {
		if _, ok := claims[name]; !ok {
			return name
		}
	}
	return "aud" // present but empty
}

// identity extracts the caller from claims whose signature and registered
// claims are already verified.
func (v *Verifier) identity(claims jwt.MapClaims) (Identity, error) {
	sub, err := requiredString(claims, "sub")
	if err != nil {
		return Identity{}, err
	}
	org, err := requiredString(claims, v.orgClaim)
	if err != nil {
		return Identity{}, err
	}
	client, err := clientID(claims)
	if err != nil {
		return Identity{}, err
	}
	onBehalf, err := actor(claims)
	if err != nil {
		return Identity{}, err
	}
	scopes, err := scopes(claims)
	if err != nil {
		return Identity{}, err
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return Identity{}, reject("malformed exp", err)
	}
	authTime, acr, err := authentication(claims)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Subject: sub, Org: org, Client: client, OnBehalf: onBehalf, Scopes: scopes, Expiry: exp.Time,
		AuthTime: authTime, ACR: acr}, nil
}

// authentication reads auth_time (a NumericDate) and acr (a string), both
// optional. A malformed one refuses the token: a step-up decision must not
// rest on a value billingd had to guess at.
func authentication(claims jwt.MapClaims) (time.Time, string, error) {
	var authTime time.Time
	if v, present := claims["auth_time"]; present {
		n, ok := v.(float64)
		if !ok || n <= 0 || n > 1<<40 {
			return time.Time{}, "", reject("malformed auth_time", nil)
		}
		authTime = time.Unix(int64(n), 0)
	}
	acr, present, ok := optionalString(claims, "acr")
	if present && (!ok || acr == "") {
		return time.Time{}, "", reject("malformed acr", nil)
	}
	return authTime, acr, nil
}

// requiredString returns claim name, which must be a non-empty string. The
// reason names the claim (a configured name, not token content).
func requiredString(claims jwt.MapClaims, name string) (string, error) {
	s, present, ok := optionalString(claims, name)
	switch {
	case !present || (ok && s == ""):
		return "", reject("missing "+name, nil)
	case !ok:
		return "", reject("malformed "+name, nil)
	}
	return s, nil
}

// optionalString reads claim name: present says whether it exists, ok whether
// it is a string.
func optionalString(claims jwt.MapClaims, name string) (s string, present, ok bool) {
	v, present := claims[name]
	if !present {
		return "", false, false
	}
	s, ok = v.(string)
	return s, true, ok && SafeIdentifier(s)
}

// maxIdentifierBytes bounds sub, org and client ids: they are stored with
// every confirmation and audit event.
const maxIdentifierBytes = 256

// SafeIdentifier reports whether an identity claim can be stored and shown
// as is (contract §4): bounded, valid UTF-8, and made only of characters a
// person sees. A person approving a change must see exactly who asked for it,
// so control characters (PostgreSQL refuses NUL, a newline forges log lines),
// format characters (zero-width joiners, bidirectional overrides that make
// "\u202enimda-omed" display as "demo-admin"), private-use, surrogate and
// unassigned code points, default-ignorable ones (Hangul fillers, variation
// selectors) and every space but U+0020 are refused; and so are visible
// look-alikes by Unicode's identifier rules (lookAlike: not NFKC, mixed
// scripts, a whole-script confusable of an ASCII name), so that
// "demo-аdmin" with a Cyrillic а can never pass for "demo-admin".
func SafeIdentifier(s string) bool {
	if len(s) > maxIdentifierBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !visible(r) {
			return false
		}
	}
	return !lookAlike(s)
}

// visible reports whether r is a character that shows as itself.
func visible(r rune) bool {
	switch {
	case r == ' ':
		return true
	case r < 0x80:
		return r > ' ' && r != 0x7f
	case !unicode.IsGraphic(r), unicode.IsSpace(r), unicode.Is(unicode.Zs, r):
		// IsGraphic leaves out Cc, Cf, Co, Cs and unassigned code points.
		return false
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), unicode.Is(unicode.Variation_Selector, r):
		return false
	case isInvisibleMark(r):
		return false
	}
	return true
}

// isInvisibleMark lists the combining marks that render as nothing on
// their own and are used to pad look-alike names.
func isInvisibleMark(r rune) bool {
	switch r {
	case 0x034F, // combining grapheme joiner
		0x17B4, 0x17B5, // Khmer inherent vowels
		0x180B, 0x180C, 0x180D, 0x180F: // Mongolian free variation selectors
		return true
	}
	return false
}

// clientID reads azp (OpenID) or client_id (RFC 9068; issuers differ) and
// rejects a wrongly typed claim rather than guess which client called.
// Both are checked when both are present: a hidden character in either is
// a token built to mislead. And both must then name the same client: which
// client holds the token decides whether its call is a person's
// (PERSON_CLIENTS), and issuers differ on which claim names the client
// acting after a token exchange (RFC 8693), so a token whose two claims
// disagree names no one client and is refused like an invalid one.
func clientID(claims jwt.MapClaims) (string, error) {
	client := ""
	for _, name := range []string{"azp", "client_id"} {
		s, present, ok := optionalString(claims, name)
		if !present {
			continue
		}
		if !ok {
			return "", reject("malformed "+name, nil)
		}
		if client != "" && s != client {
			return "", reject("azp and client_id disagree", nil)
		}
		client = s
	}
	return client, nil
}

// actor reports whether the token names an actor (RFC 8693 §4.1: act, a
// JSON object naming the party that acts for sub, e.g. an agent that
// exchanged a person's token for its own). A token acting on someone's
// behalf is never that person's own call. An act that is not an object is
// refused rather than guessed at.
func actor(claims jwt.MapClaims) (bool, error) {
	v, present := claims["act"]
	if !present {
		return false, nil
	}
	if _, ok := v.(map[string]any); !ok {
		return false, reject("malformed act", nil)
	}
	return true, nil
}

// scopes reads scope (RFC 8693/9068: one space-separated string) or, when
// absent, scp (Azure AD and Okta: an array, sometimes a string). A malformed
// value is rejected rather than read as "no scopes" so that an issuer
// misconfiguration shows up in the logs as such.
func scopes(claims jwt.MapClaims) ([]string, error) {
	if v, ok := claims["scope"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, reject("malformed scope", nil)
		}
		return strings.Fields(s), nil
	}
	v, ok := claims["scp"]
	if !ok {
		return nil, nil
	}
	switch scp := v.(type) {
	case string:
		return strings.Fields(scp), nil
	case []any:
		out := make([]string, 0, len(scp))
		for _, e := range scp {
			s, ok := e.(string)
			if !ok {
				return nil, reject("malformed scp", nil)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, reject("malformed scp", nil)
	}
}

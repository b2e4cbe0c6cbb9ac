package auth

import (
	"context"
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
	Subject string    // sub: the principal
	Org     string    // the configured org claim
	Client  string    // azp, else client_id, else ""
	Scopes  []string  // from scope, else scp
	Expiry  time.Time // exp
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
	if id, ok := v.verified.get(raw, now); ok {
		return id, nil
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(raw, claims, v.keys.KeyfuncCtx(ctx), v.options...); err != nil {
		return Identity{}, reject(parseFailure(err, claims), err)
	}
	id, err := v.identity(claims)
	if err == nil {
		v.verified.put(raw, id, now)
	}
	return id, err
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
	scopes, err := scopes(claims)
	if err != nil {
		return Identity{}, err
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return Identity{}, reject("malformed exp", err)
	}
	return Identity{Subject: sub, Org: org, Client: client, Scopes: scopes, Expiry: exp.Time}, nil
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
	return s, true, ok && safeIdentifier(s)
}

// maxIdentifierBytes bounds sub, org and client ids: they are stored with
// every confirmation and audit event.
const maxIdentifierBytes = 256

// safeIdentifier reports whether an identity claim can be stored and shown
// as is: bounded, valid UTF-8, without control characters (PostgreSQL
// refuses NUL in text, and a newline or escape would forge log lines).
func safeIdentifier(s string) bool {
	if len(s) > maxIdentifierBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// clientID prefers azp (OpenID, RFC 9068 uses client_id; issuers differ) and
// rejects a wrongly typed claim rather than guess which client called.
func clientID(claims jwt.MapClaims) (string, error) {
	for _, name := range []string{"azp", "client_id"} {
		s, present, ok := optionalString(claims, name)
		if !present {
			continue
		}
		if !ok {
			return "", reject("malformed "+name, nil)
		}
		if s != "" {
			return s, nil
		}
	}
	return "", nil
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

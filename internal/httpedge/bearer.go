package httpedge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/requestid"
)

// Verifier checks bearer access tokens (internal/auth.Verifier).
type Verifier interface {
	Verify(ctx context.Context, raw string) (auth.Identity, error)
}

// Bearer authenticates requests by their bearer access token, for the REST
// API and the MCP endpoint alike.
type Bearer struct {
	Verifier Verifier
	Logger   *slog.Logger
}

// Authenticate verifies r's bearer token. A refusal is an unauthorized
// *billing.Error whose message says only whether a token was there; why it
// was refused goes to the log.
func (b Bearer) Authenticate(r *http.Request) (auth.Identity, error) {
	raw, ok := BearerToken(r)
	if !ok {
		return auth.Identity{}, billing.Errorf(billing.CodeUnauthorized, "missing bearer access token")
	}
	id, err := b.Verifier.Verify(r.Context(), raw)
	if err != nil {
		if b.Logger != nil {
			b.Logger.InfoContext(r.Context(), "access token refused", "request_id", requestid.From(r.Context()), "reason", err)
		}
		return auth.Identity{}, billing.Errorf(billing.CodeUnauthorized, "invalid access token")
	}
	setCaller(r.Context(), id.Org, id.Subject)
	return id, nil
}

// Require admits only requests with a valid bearer token, whose identity
// it puts in the request's context (IdentityFrom). Others get 401, the
// envelope and the challenge for metadata and scopes.
func (b Bearer) Require(metadata string, scopes ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := b.Authenticate(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", Challenge(r, metadata, err, scopes...))
				WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
		})
	}
}

type identityKey struct{}

// IdentityFrom is the identity Require verified for this request.
func IdentityFrom(ctx context.Context) (auth.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(auth.Identity)
	return id, ok
}

// BearerToken is the token of an "Authorization: Bearer" header.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Challenge is the WWW-Authenticate value for refusing r with err
// (contract §4, RFC 6750, RFC 9728): where the protected resource metadata
// is and which scopes to ask for, plus error="insufficient_scope" for a
// missing scope, or error="invalid_token" when a token was presented but
// refused. It is the only place billingd builds a bearer challenge.
func Challenge(r *http.Request, metadata string, err error, scopes ...string) string {
	scope := strings.Join(scopes, " ")
	if billing.ErrorCode(err) == billing.CodeInsufficientScope {
		return fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s", resource_metadata="%s"`, scope, metadata)
	}
	if _, presented := BearerToken(r); presented {
		return fmt.Sprintf(`Bearer error="invalid_token", resource_metadata="%s", scope="%s"`, metadata, scope)
	}
	return fmt.Sprintf(`Bearer resource_metadata="%s", scope="%s"`, metadata, scope)
}

// StepUpChallenge is RFC 9470's challenge for the verify level: the person
// must authenticate again (max_age=0), with one of the acr values when the
// operator requires some.
func StepUpChallenge(st *billing.StepUp, metadata string) string {
	value := `Bearer error="insufficient_user_authentication", ` +
		`error_description="the person who asked must sign in again; or confirm at the verify_url", max_age=0`
	if len(st.ACRValues) > 0 {
		value += fmt.Sprintf(`, acr_values="%s"`, strings.Join(st.ACRValues, " "))
	}
	return value + fmt.Sprintf(`, resource_metadata="%s"`, metadata)
}

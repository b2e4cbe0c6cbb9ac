package rest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/websession"
)

const callerKey = "caller"

// require authenticates the bearer token and checks that it carries scope.
// Failures carry the WWW-Authenticate challenge of RFC 6750 / RFC 9728 so
// that a client can discover where to get (or step up) a token.
func (s *server) require(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			raw, ok := bearerToken(c.Request())
			if !ok && c.Request().Header.Get("Authorization") == "" {
				if ws := s.session(c); ws != nil {
					return s.withSession(c, next, ws, scope)
				}
			}
			if !ok {
				return s.challenge(c, scope, billing.Errorf(billing.CodeUnauthorized, "missing bearer access token"))
			}
			id, err := s.Verifier.Verify(c.Request().Context(), raw)
			if err != nil {
				s.log.InfoContext(c.Request().Context(), "access token refused", "request_id", requestID(c), "reason", err)
				return s.challenge(c, scope, billing.Errorf(billing.CodeUnauthorized, "invalid access token"))
			}
			if !id.HasScope(scope) {
				return s.challenge(c, scope, billing.Errorf(billing.CodeInsufficientScope, "the access token lacks the %s scope", scope))
			}
			c.Set(callerKey, billing.Caller{
				Org: id.Org, Principal: id.Subject, Client: id.Client,
				Admin: id.HasScope(auth.ScopeAdmin), RequestID: requestID(c),
				AuthTime: id.AuthTime, ACR: id.ACR,
			})
			return next(c)
		}
	}
}

// withSession serves an API request made by a signed-in page: the same
// scopes as the access token the sign-in produced, and the CSRF checks of
// a cookie-authenticated request.
func (s *server) withSession(c echo.Context, next echo.HandlerFunc, ws *websession.Session, scope string) error {
	caller, id := sessionCaller(ws, requestID(c))
	if !id.HasScope(scope) {
		return billing.Errorf(billing.CodeInsufficientScope, "your sign-in does not grant the %s scope", scope)
	}
	if err := s.checkCSRF(c, ws); err != nil {
		return err
	}
	c.Set(callerKey, caller)
	return next(c)
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (s *server) challenge(c echo.Context, scope string, err *billing.Error) error {
	metadata := s.PublicBaseURL + "/.well-known/oauth-protected-resource"
	value := fmt.Sprintf(`Bearer resource_metadata="%s", scope="%s"`, metadata, scope)
	if err.Code == billing.CodeInsufficientScope {
		value = fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s", resource_metadata="%s"`, scope, metadata)
	} else if _, present := bearerToken(c.Request()); present {
		value = fmt.Sprintf(`Bearer error="invalid_token", resource_metadata="%s", scope="%s"`, metadata, scope)
	}
	c.Response().Header().Set("WWW-Authenticate", value)
	return err
}

// stepUpChallenge is RFC 9470's challenge for the verify level: the person
// must authenticate again (max_age=0), with one of the acr values when the
// operator requires some.
func (s *server) stepUpChallenge(st *billing.StepUp) string {
	value := `Bearer error="insufficient_user_authentication", ` +
		`error_description="the person who asked must sign in again; or confirm at the verify_url", max_age=0`
	if len(st.ACRValues) > 0 {
		value += fmt.Sprintf(`, acr_values="%s"`, strings.Join(st.ACRValues, " "))
	}
	return value + fmt.Sprintf(`, resource_metadata="%s/.well-known/oauth-protected-resource"`, s.PublicBaseURL)
}

func callerOf(c echo.Context) billing.Caller {
	caller, _ := c.Get(callerKey).(billing.Caller)
	return caller
}

// resourceMetadata serves RFC 9728 protected resource metadata for the
// resource at PublicBaseURL+path.
func (s *server) resourceMetadata(path string) echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{
			"resource":                 s.PublicBaseURL + path,
			"authorization_servers":    []string{s.Issuer},
			"scopes_supported":         []string{auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin},
			"bearer_methods_supported": []string{"header"},
		})
	}
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

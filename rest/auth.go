package rest

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/websession"
)

const callerKey = "caller"

// require authenticates the bearer token and checks that it carries scope.
// Failures carry the WWW-Authenticate challenge of RFC 6750 / RFC 9728 so
// that a client can discover where to get (or step up) a token.
func (s *server) require(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if _, presented := httpedge.BearerToken(r); !presented && r.Header.Get("Authorization") == "" {
				if ws := s.session(c); ws != nil {
					return s.withSession(c, next, ws, scope)
				}
			}
			id, err := s.bearer.Authenticate(r)
			if err != nil {
				return s.challenge(c, scope, err)
			}
			if !id.HasScope(scope) {
				return s.challenge(c, scope, billing.Errorf(billing.CodeInsufficientScope, "the access token lacks the %s scope", scope))
			}
			c.Set(callerKey, billing.Caller{
				Org: id.Org, Principal: id.Subject, Client: id.Client,
				Admin: id.HasScope(auth.ScopeAdmin), RequestID: requestID(c),
				AuthTime: id.AuthTime, ACR: id.ACR,
				// A token acting on someone's behalf (RFC 8693 act) is an
				// agent's, whatever its client (contract §4).
				Agent: id.OnBehalf,
				// The caller's own call, by the token's word; billing
				// counts it as relayed unless the client is one of
				// PERSON_CLIENTS (billing/person.go).
				Consent: billing.ConsentPersonSession,
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

// challenge puts the bearer challenge for scope on the refusal err.
func (s *server) challenge(c echo.Context, scope string, err error) error {
	metadata := s.PublicBaseURL + "/.well-known/oauth-protected-resource"
	c.Response().Header().Set("WWW-Authenticate", httpedge.Challenge(c.Request(), metadata, err, scope))
	return err
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

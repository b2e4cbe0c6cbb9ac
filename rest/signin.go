package rest

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/signin"
	"github.com/billingd/billingd/internal/websession"
)

// People sign in on the dashboard, the approval page and the verification
// page with OpenID Connect (internal/signin); the result is a server-side
// session in PostgreSQL (internal/websession) named by an HttpOnly,
// SameSite=Lax cookie (Secure, with the __Host- prefix, under https). The
// pages' scripts call the same REST API with that cookie instead of a bearer
// token; every state-changing request made with the cookie must carry the
// session's CSRF token (header X-CSRF-Token, or the form field csrf_token)
// and pass net/http's cross-origin protection (Sec-Fetch-Site / Origin).

// SignIn is the OpenID Connect relying party.
type SignIn interface {
	AuthURL(r signin.Request, fresh bool, acrValues []string) string
	Exchange(ctx context.Context, code string, r signin.Request, authenticatedAfter time.Time) (signin.Result, error)
}

const (
	csrfHeader = "X-CSRF-Token"
	csrfField  = "csrf_token"
	loginTTL   = 10 * time.Minute
	// maxSessionTTL bounds a session; it also ends with its access token.
	maxSessionTTL = 8 * time.Hour
)

func (s *server) secureCookies() bool { return strings.HasPrefix(s.PublicBaseURL, "https://") }

// sessionCookie and loginCookie are the cookies' names; under https the
// __Host- prefix pins them to this host and path /.
func (s *server) sessionCookie() string { return s.cookieName("billingd_session") }
func (s *server) loginCookie() string   { return s.cookieName("billingd_login") }

func (s *server) cookieName(base string) string {
	if s.secureCookies() {
		return "__Host-" + base
	}
	return base
}

func (s *server) setCookie(c echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: s.secureCookies(), SameSite: http.SameSiteLaxMode})
}

func mountSignIn(e *echo.Echo, s *server) {
	e.GET("/auth/login", s.login, dashboardHeaders)
	e.GET("/auth/callback", s.callback, dashboardHeaders)
	e.POST("/auth/logout", s.logout, dashboardHeaders)
	e.GET("/auth/session", s.sessionInfo, dashboardHeaders)
	e.GET("/verify/:id", s.verifyPage, verifyHeaders)
	e.POST("/verify/:id", s.verifyDecision, verifyHeaders)
}

// login starts a sign-in: GET /auth/login?return_to=/path. The approval
// page starts its sign-in here, returning to /approvals/<id>: that sign-in
// is for the confirmation it approves.
func (s *server) login(c echo.Context) error {
	returnTo := safeReturnPath(c.QueryParam("return_to"))
	return s.startSignIn(c, returnTo, "", approvalOf(returnTo))
}

// approvalOf is the confirmation whose approval page returnTo is, or "".
func approvalOf(returnTo string) string {
	id, ok := strings.CutPrefix(returnTo, "/approvals/")
	if !ok || !billing.WellFormedConfirmationID(id) {
		return ""
	}
	return id
}

// startSignIn records the request (any replica may take the callback) and
// sends the browser to the identity provider. verifyID names the
// confirmation of a verification sign-in, which must be a new
// authentication (max_age=0, prompt=login). forConfirmation names the
// confirmation the sign-in is for (to verify or approve it): while it waits
// for a person, the start is counted in its own budget, which no flood of
// other starts can spend (websession.LoginLimits).
func (s *server) startSignIn(c echo.Context, returnTo, verifyID, forConfirmation string) error {
	if s.SignIn == nil || s.Sessions == nil {
		return s.signInPage(c, "Sign-in is not configured on this billingd (OIDC_CLIENT_ID).")
	}
	req := signin.NewRequest()
	browser := websession.NewSecret()
	err := s.Sessions.SaveLogin(c.Request().Context(), websession.Login{StateHash: websession.Hash(req.State),
		BrowserHash: websession.Hash(browser), Nonce: req.Nonce, CodeVerifier: req.Verifier,
		ReturnTo: returnTo, VerifyID: verifyID, ForConfirmation: forConfirmation,
		Client: websession.AddressBucket(c.RealIP()), TTL: loginTTL}, s.SignInLimits)
	if limited, ok := errors.AsType[*websession.LimitedError](err); ok {
		return &billing.Error{Code: billing.CodeRateLimited, Message: "too many sign-ins started; retry later",
			RetryAfter: limited.RetryAfter}
	}
	if err != nil {
		return err
	}
	s.setCookie(c, s.loginCookie(), browser, int(loginTTL.Seconds()))
	var acr []string
	if verifyID != "" {
		acr = s.Service.VerifyACRValues()
	}
	return c.Redirect(http.StatusSeeOther, s.SignIn.AuthURL(req, verifyID != "", acr))
}

// callback completes a sign-in: the state must be one billingd issued, to
// this browser, not used before; the ID token is checked by
// internal/signin and the access token like any bearer token.
func (s *server) callback(c echo.Context) error {
	ctx := c.Request().Context()
	refused := func(reason string, err error) error {
		s.log.InfoContext(ctx, "sign-in refused", "request_id", requestID(c), "reason", reason, "err", err)
		return s.signInPage(c, "The sign-in did not complete. Start again from the page you were on.")
	}
	state := c.QueryParam("state")
	browser, err := c.Cookie(s.loginCookie())
	if state == "" || err != nil || browser.Value == "" {
		return refused("no state or no login cookie", err)
	}
	// The sign-in is used up only by the browser that started it: whoever
	// else learnt its state (or sent this browser to a callback with
	// another state) changes nothing, neither the row nor this browser's
	// login cookie.
	login, err := s.Sessions.TakeLogin(ctx, websession.Hash(state), websession.Hash(browser.Value))
	if err != nil {
		return refused("unknown or expired state, or the state of another browser", err)
	}
	s.setCookie(c, s.loginCookie(), "", -1)
	if c.QueryParam("error") != "" || c.QueryParam("code") == "" {
		// The provider's error (RFC 6749 §4.1.2.1) is what an operator needs
		// to fix its settings; it goes to the log, bounded, never to the page.
		return refused("the identity provider answered with an error", fmt.Errorf("%.64s: %.300s",
			c.QueryParam("error"), c.QueryParam("error_description")))
	}
	var freshAfter time.Time
	if login.VerifyID != "" {
		freshAfter = login.CreatedAt
	}
	res, err := s.SignIn.Exchange(ctx, c.QueryParam("code"),
		signin.Request{State: state, Nonce: login.Nonce, Verifier: login.CodeVerifier}, freshAfter)
	if err != nil {
		return refused("code exchange or ID token", err)
	}
	id, err := s.Verifier.Verify(ctx, res.AccessToken)
	// A session is a person's own (billing/person.go): an access token
	// that acts on someone's behalf (act) cannot open one.
	if err != nil || id.Subject != res.Subject || id.OnBehalf {
		return refused("access token", err)
	}
	// The session may do what the provider granted (the access token's
	// scopes), not what the sign-in asked for (OIDC_SCOPES): a provider's
	// consent grants only what the person may have.
	if !slices.ContainsFunc(id.Scopes, isBillingScope) {
		s.log.WarnContext(ctx, "signed in without any billing scope: the identity provider granted none of those OIDC_SCOPES asks for",
			"request_id", requestID(c), "subject", id.Subject, "granted", id.Scopes)
	}
	return s.beginSession(c, login, res, id)
}

func isBillingScope(s string) bool {
	return s == auth.ScopeRead || s == auth.ScopeWrite || s == auth.ScopeAdmin
}

// beginSession replaces any session of this browser with a new one (a new
// id after every sign-in) and goes back to where the sign-in started.
func (s *server) beginSession(c echo.Context, login websession.Login, res signin.Result, id auth.Identity) error {
	ctx := c.Request().Context()
	if old, err := c.Cookie(s.sessionCookie()); err == nil {
		_ = s.Sessions.DeleteSession(ctx, websession.Hash(old.Value))
	}
	secret := websession.NewSecret()
	expires := time.Now().Add(maxSessionTTL)
	if id.Expiry.Before(expires) {
		expires = id.Expiry
	}
	ws := websession.Session{IDHash: websession.Hash(secret), CSRF: websession.NewSecret(), Org: id.Org,
		Subject: res.Subject, Client: id.Client, Scopes: id.Scopes, AuthTime: res.AuthTime, ACR: res.ACR,
		ExpiresAt: expires}
	if login.VerifyID != "" {
		ws.VerifyID, ws.VerifyAuthTime, ws.VerifyACR = login.VerifyID, res.AuthTime, res.ACR
	}
	if err := s.Sessions.SaveSession(ctx, ws); err != nil {
		return err
	}
	s.setCookie(c, s.sessionCookie(), secret, int(time.Until(expires).Seconds()))
	return c.Redirect(http.StatusSeeOther, login.ReturnTo)
}

// session is the browser's session, or nil.
func (s *server) session(c echo.Context) *websession.Session {
	if s.Sessions == nil {
		return nil
	}
	cookie, err := c.Cookie(s.sessionCookie())
	if err != nil || cookie.Value == "" {
		return nil
	}
	ws, err := s.Sessions.Session(c.Request().Context(), websession.Hash(cookie.Value))
	if err != nil {
		if !errors.Is(err, websession.ErrNotFound) {
			s.log.WarnContext(c.Request().Context(), "read session", "err", err)
		}
		return nil
	}
	return &ws
}

// checkCSRF requires, for a state-changing request made with the session
// cookie, the session's synchronizer token and a same-origin request.
func (s *server) checkCSRF(c echo.Context, ws *websession.Session) error {
	r := c.Request()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	token := r.Header.Get(csrfHeader)
	if token == "" {
		token = r.PostFormValue(csrfField)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(ws.CSRF)) != 1 || s.crossOrigin.Check(r) != nil {
		return billing.Errorf(billing.CodeOperationDenied, "the request did not come from billingd's own page (CSRF)")
	}
	return nil
}

// sessionCaller is the caller of an API request made with the session:
// billingd's own signed-in page, which billing counts as a person's.
func sessionCaller(ws *websession.Session, rid string) (billing.Caller, auth.Identity) {
	id := auth.Identity{Subject: ws.Subject, Org: ws.Org, Client: ws.Client, Scopes: ws.Scopes, Expiry: ws.ExpiresAt,
		AuthTime: ws.AuthTime, ACR: ws.ACR}
	return billing.Caller{Org: ws.Org, Principal: ws.Subject, Client: ws.Client, Admin: id.HasScope(auth.ScopeAdmin),
		RequestID: rid, AuthTime: ws.AuthTime, ACR: ws.ACR, Session: true, Consent: billing.ConsentPersonSession}, id
}

// logout ends the session (POST with the CSRF token).
func (s *server) logout(c echo.Context) error {
	ws := s.session(c)
	if ws != nil {
		if err := s.checkCSRF(c, ws); err != nil {
			return err
		}
		if err := s.Sessions.DeleteSession(c.Request().Context(), ws.IDHash); err != nil {
			return err
		}
	}
	s.setCookie(c, s.sessionCookie(), "", -1)
	return c.NoContent(http.StatusNoContent)
}

// sessionInfo tells the pages' scripts who is signed in, the CSRF token
// their API calls must carry, and the scopes they may use: those of the
// bearer token the call carries (a token pasted under billingd dev), else
// the session's. The pages ask only for what these allow (an admin's audit
// log, for instance), so a person's page makes no call bound to be refused.
func (s *server) sessionInfo(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	info := map[string]any{"signed_in": false, "sign_in": s.SignIn != nil, "token_paste": s.TokenPaste,
		"scopes": []string{}}
	if ws := s.session(c); ws != nil {
		info["signed_in"], info["subject"], info["org"], info["csrf_token"] = true, ws.Subject, ws.Org, ws.CSRF
		info["scopes"] = append([]string{}, ws.Scopes...)
	}
	if c.Request().Header.Get("Authorization") != "" {
		info["scopes"] = []string{}
		if id, err := s.bearer.Authenticate(c.Request()); err == nil {
			info["scopes"] = append([]string{}, id.Scopes...)
		}
	}
	return c.JSON(http.StatusOK, info)
}

// safeReturnPath keeps a return address on this server: an absolute path
// that every browser resolves against billingd's own origin, else "/".
//
// It is judged the way a browser's URL parser (WHATWG URL) will read it
// from the Location header: that parser first removes every ASCII tab and
// newline anywhere and C0 controls and spaces at either end, and reads a
// backslash as a slash in http(s) URLs, so "/\t/evil.example" and
// "/\\evil.example" are "//evil.example", another host. Rather than
// imitate that, any character a path of billingd's never has is refused:
// only printable ASCII without a backslash, starting with one slash and
// not two, and at most websession.MaxReturnTo bytes (every sign-in start
// stores it). What is left is a path-absolute reference: no scheme, no
// host, whatever the browser strips or maps.
func safeReturnPath(p string) string {
	if len(p) > websession.MaxReturnTo || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "/"
	}
	for i := 0; i < len(p); i++ {
		if b := p[i]; b <= ' ' || b >= 0x7f || b == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return p
}

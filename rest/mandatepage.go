package rest

import (
	"bytes"
	"html/template"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/websession"
)

// The mandates page (/mandates, contract §13) is rendered by the server,
// without script, like the verification page: opening it starts a fresh
// sign-in at the identity provider (max_age=0) unless this browser's
// session came from one for this page; the grant needs that sign-in to be
// at most five minutes old (billing.MandateSignInMaxAge), so a person who
// lingers signs in again. Granting is two steps: the bounds entered, then
// stated in words with a button to grant exactly those. Every form carries
// the session's CSRF token.

var mandatesTemplate = template.Must(template.ParseFS(webFiles, "web/mandates.html"))

// mandatesSignIn marks a session begun by the mandates page's fresh
// sign-in (websession.Session.VerifyID); no confirmation id looks like it.
const mandatesSignIn = "mandates"

type mandatesView struct {
	AssetVersion   string
	Title, Message string
	Failed, Again  bool
	Subject, CSRF  string
	Currency       string
	Plans          []billing.PlanView
	Form, Listed   bool
	Mandates       []billing.Mandate
	Review         *billing.Mandate
	Granted        *billing.Mandate
}

func mountMandatesPage(e *echo.Echo, s *server) {
	e.GET("/mandates", s.mandatesPage, verifyHeaders)
	e.POST("/mandates", s.mandatesPost, verifyHeaders)
	e.POST("/mandates/:id/revoke", s.mandatesRevoke, verifyHeaders)
}

// mandateSession is the browser's session from the page's fresh sign-in,
// the caller it makes (a person's, with that sign-in's time) and the
// identity whose scopes bound what the page may do, as the REST routes'.
func (s *server) mandateSession(c echo.Context) (*websession.Session, billing.Caller, auth.Identity) {
	ws := s.session(c)
	if ws == nil || ws.VerifyID != mandatesSignIn {
		return nil, billing.Caller{}, auth.Identity{}
	}
	caller, id := sessionCaller(ws, requestID(c))
	caller.AuthTime, caller.ACR = ws.VerifyAuthTime, ws.VerifyACR
	return ws, caller, id
}

// mandatesPage lists the person's mandates with a form to grant one, or
// starts the fresh sign-in.
func (s *server) mandatesPage(c echo.Context) error {
	ws, caller, id := s.mandateSession(c)
	if ws == nil || c.QueryParam("sign_in") == "again" {
		return s.startSignIn(c, "/mandates", mandatesSignIn, "")
	}
	if !id.HasScope(auth.ScopeRead) {
		return s.renderMandates(c, noScope(auth.ScopeRead))
	}
	return s.renderMandatesList(c, ws, caller, mandatesView{Title: "Standing mandates"})
}

// noScope is the page that refuses a sign-in without scope, as the REST
// routes refuse its token.
func noScope(scope string) mandatesView {
	return mandatesView{Title: "Refused", Failed: true,
		Message: "Your sign-in does not allow this (it lacks " + scope + "), so nothing was recorded."}
}

func (s *server) renderMandatesList(c echo.Context, ws *websession.Session, caller billing.Caller, v mandatesView) error {
	ctx := c.Request().Context()
	list, err := s.Service.Mandates(ctx, caller)
	if err != nil {
		return s.mandatesRefused(c, err)
	}
	currency, err := s.Service.MandateCurrency(ctx, caller)
	if err != nil {
		return s.mandatesRefused(c, err)
	}
	v.Subject, v.CSRF, v.Mandates, v.Listed, v.Form = ws.Subject, ws.CSRF, list, true, true
	v.Currency, v.Plans = strings.ToUpper(currency), s.Service.Plans()
	return s.renderMandates(c, v)
}

// mandateForm is the session a form of the page was posted in, or the
// page that refuses it: the fresh sign-in has ended, or the form did not
// come from the page (CSRF).
func (s *server) mandateForm(c echo.Context) (*websession.Session, billing.Caller, *mandatesView) {
	ws, caller, id := s.mandateSession(c)
	if ws == nil {
		return nil, caller, &mandatesView{Title: "Sign in again", Failed: true, Again: true,
			Message: "Your sign-in for mandates has ended: sign in again."}
	}
	if err := s.checkCSRF(c, ws); err != nil {
		return nil, caller, &mandatesView{Title: "Refused", Failed: true,
			Message: "This form did not come from billingd's mandates page, so nothing was recorded."}
	}
	if !id.HasScope(auth.ScopeWrite) { // granting and revoking, as POST and DELETE /api/billing/mandates
		v := noScope(auth.ScopeWrite)
		return nil, caller, &v
	}
	return ws, caller, nil
}

// mandatesPost is the grant form: action review states the bounds in
// words; action grant grants exactly what the review stated.
func (s *server) mandatesPost(c echo.Context) error {
	ws, caller, refused := s.mandateForm(c)
	if refused != nil {
		return s.renderMandates(c, *refused)
	}
	ctx := c.Request().Context()
	if c.FormValue("action") == "grant" {
		req, err := grantForm(c)
		if err != nil {
			return s.mandatesRefused(c, err)
		}
		m, err := s.Service.GrantMandate(ctx, caller, req)
		if err != nil {
			return s.mandatesRefused(c, err)
		}
		return s.renderMandatesList(c, ws, caller, mandatesView{Title: "Mandate granted", Granted: &m})
	}
	currency, err := s.Service.MandateCurrency(ctx, caller)
	if err != nil {
		return s.mandatesRefused(c, err)
	}
	req, err := reviewForm(c, currency)
	if err != nil {
		return s.mandatesRefused(c, err)
	}
	m, err := s.Service.PreviewMandate(ctx, caller, req)
	if err != nil {
		return s.mandatesRefused(c, err)
	}
	return s.renderMandates(c, mandatesView{Title: "Grant this mandate?", Review: &m, Subject: ws.Subject, CSRF: ws.CSRF})
}

// mandatesRevoke revokes one of the person's mandates.
func (s *server) mandatesRevoke(c echo.Context) error {
	ws, caller, refused := s.mandateForm(c)
	if refused != nil {
		return s.renderMandates(c, *refused)
	}
	if _, err := s.Service.RevokeMandate(c.Request().Context(), caller, c.Param("id")); err != nil {
		return s.mandatesRefused(c, err)
	}
	return s.renderMandatesList(c, ws, caller, mandatesView{Title: "Standing mandates", Message: "Revoked: the agent can no longer use it."})
}

// reviewForm reads the form a person fills in: amounts in the currency's
// major units, the lifetime in days.
func reviewForm(c echo.Context, currency string) (billing.MandateRequest, error) {
	form, err := c.FormParams()
	if err != nil {
		return billing.MandateRequest{}, billing.Errorf(billing.CodeInvalidRequest, "unreadable form")
	}
	exponent := billing.DigitsOf(currency).Exponent
	maxDue, err1 := minorUnits(form.Get("max_amount_due"), exponent)
	budget, err2 := minorUnits(form.Get("budget"), exponent)
	changes, err3 := strconv.Atoi(form.Get("max_changes"))
	days, err4 := strconv.Atoi(form.Get("days"))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || days < 1 || days > 90 {
		return billing.MandateRequest{}, billing.Errorf(billing.CodeInvalidRequest,
			"every bound is required: amounts as numbers in %s, changes and days as whole numbers (days 1 to 90)", strings.ToUpper(currency))
	}
	expires := time.Now().Add(time.Duration(days) * 24 * time.Hour).UTC().Truncate(time.Second)
	maxSeats, err := optionalInt(form.Get("max_quantity"))
	if err != nil {
		return billing.MandateRequest{}, err
	}
	return billing.MandateRequest{Client: strings.TrimSpace(form.Get("client")), Operations: operationsOf(form["operations"]),
		ToPlans: form["to_plans"], MaxAmountDueCents: &maxDue, BudgetCents: &budget, MaxChanges: &changes,
		ExpiresAt: &expires, MaxQuantity: maxSeats}, nil
}

// optionalInt reads the most seats a mandate may set: nil when the field
// is empty (billing refuses it with change_seats, and without it).
func optionalInt(v string) (*int64, error) {
	if strings.TrimSpace(v) == "" || v == "0" {
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return nil, billing.Errorf(billing.CodeInvalidRequest, "the most seats must be a whole number")
	}
	return &n, nil
}

// grantForm reads the review's hidden fields: exactly the bounds stated.
func grantForm(c echo.Context) (billing.MandateRequest, error) {
	form, err := c.FormParams()
	if err != nil {
		return billing.MandateRequest{}, billing.Errorf(billing.CodeInvalidRequest, "unreadable form")
	}
	maxDue, err1 := strconv.ParseInt(form.Get("max_amount_due_cents"), 10, 64)
	budget, err2 := strconv.ParseInt(form.Get("budget_cents"), 10, 64)
	changes, err3 := strconv.Atoi(form.Get("max_changes"))
	expires, err4 := time.Parse(time.RFC3339, form.Get("expires_at"))
	maxSeats, err5 := optionalInt(form.Get("max_quantity"))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return billing.MandateRequest{}, billing.Errorf(billing.CodeInvalidRequest, "the reviewed bounds are incomplete: start again")
	}
	return billing.MandateRequest{Client: form.Get("client"), Operations: operationsOf(form["operations"]),
		ToPlans: form["to_plans"], MaxAmountDueCents: &maxDue, BudgetCents: &budget, MaxChanges: &changes,
		ExpiresAt: &expires, MaxQuantity: maxSeats}, nil
}

func operationsOf(values []string) []billing.Operation {
	ops := make([]billing.Operation, len(values))
	for i, v := range values {
		ops[i] = billing.Operation(v)
	}
	return ops
}

// minorUnits reads an amount a person typed ("30", "30.5", "1,000.25")
// in minor units of exponent digits; more digits than the currency has
// are refused rather than rounded.
func minorUnits(s string, exponent int) (int64, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	r, ok := new(big.Rat).SetString(s)
	if !ok || r.Sign() < 0 || strings.ContainsAny(s, "eE/") {
		return 0, billing.Errorf(billing.CodeInvalidRequest, "not an amount")
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exponent)), nil)))
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, billing.Errorf(billing.CodeInvalidRequest, "not an amount in this currency")
	}
	return r.Num().Int64(), nil
}

// mandatesRefused states a refusal on the page.
func (s *server) mandatesRefused(c echo.Context, err error) error {
	if httpedge.StatusOf(err) >= 500 {
		s.log.ErrorContext(c.Request().Context(), "mandates page", "request_id", requestID(c), "err", err)
	}
	again := billing.ErrorCode(err) == billing.CodeInsufficientUserAuthentication
	return s.renderMandates(c, mandatesView{Title: "Not granted", Failed: true, Again: again,
		Message: billing.PublicMessage(err) + " (" + string(billing.ErrorCode(err)) + ")"})
}

// renderMandates answers with the page, always 200 (see renderVerify).
func (s *server) renderMandates(c echo.Context, v mandatesView) error {
	v.AssetVersion = assetVersion()
	var page bytes.Buffer
	if err := mandatesTemplate.Execute(&page, v); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, page.Bytes())
}

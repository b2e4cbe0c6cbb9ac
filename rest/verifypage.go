package rest

import (
	"bytes"
	"html/template"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/websession"
)

// The verification page (verify_url, contract §10) is rendered by the
// server, without script: opening it always starts a fresh sign-in at the
// identity provider (max_age=0, prompt=login) for this confirmation; only
// after that sign-in, and only for the person who asked, does it show the
// summary and a CSRF-protected form to confirm or decline. The address is
// never pre-authenticated: whoever opens it must prove who they are.

var verifyTemplate = template.Must(template.ParseFS(webFiles, "web/verify.html"))

// verifyCSP: no script at all; the form posts back to billingd only.
const verifyCSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func verifyHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		setPageHeaders(c.Response().Header(), verifyCSP, "no-store")
		return next(c)
	}
}

type verifyView struct {
	AssetVersion   string
	Title, Message string
	Failed, Form   bool
	Again          bool // offer a new sign-in (as someone else)
	Confirmation   *billing.ConfirmationView
	ID, CSRF       string
	Subject        string
}

// verifyPage shows the confirmation to the person who has just signed in
// for it, or starts that sign-in.
func (s *server) verifyPage(c echo.Context) error {
	id := c.Param("id")
	if !billing.WellFormedConfirmationID(id) {
		return s.renderVerify(c, verifyView{Title: "Not a verification link", Failed: true,
			Message: "This address does not name a plan change."})
	}
	ws := s.session(c)
	if ws == nil || ws.VerifyID != id || c.QueryParam("sign_in") == "again" {
		return s.startSignIn(c, "/verify/"+id, id, id)
	}
	view, err := s.Service.VerificationView(c.Request().Context(), personOf(ws, c), id)
	if err != nil {
		return s.verifyRefused(c, id, err)
	}
	return s.renderVerify(c, verifyView{Title: "Confirm a plan change", Confirmation: &view,
		Form: view.VerifiedAt == nil, ID: id, CSRF: ws.CSRF, Subject: ws.Subject,
		Message: confirmedMessage(view)})
}

func confirmedMessage(v billing.ConfirmationView) string {
	if v.VerifiedAt != nil {
		return "Confirmed. Your agent's next call makes this change."
	}
	return ""
}

// verifyDecision records Confirm or Decline.
func (s *server) verifyDecision(c echo.Context) error {
	id := c.Param("id")
	ws := s.session(c)
	if ws == nil || ws.VerifyID != id || !billing.WellFormedConfirmationID(id) {
		return s.renderVerify(c, verifyView{Title: "Sign in again", Failed: true,
			Message: "Your sign-in for this change has ended. Open the verification link again."})
	}
	if err := s.checkCSRF(c, ws); err != nil {
		return s.renderVerify(c, verifyView{Title: "Refused", Failed: true,
			Message: "This form did not come from billingd's verification page, so nothing was recorded."})
	}
	agree := c.FormValue("decision") == "confirm"
	view, err := s.Service.Verify(c.Request().Context(), personOf(ws, c), id, agree)
	if err != nil {
		return s.verifyRefused(c, id, err)
	}
	message := "Confirmed. Your agent's next call makes this change; nothing has changed yet."
	if !agree {
		message = "Declined. The change is cancelled and will not be made."
	}
	return s.renderVerify(c, verifyView{Title: "Thank you", Confirmation: &view, Message: message})
}

// verifyRefused explains a refusal without showing anything of the
// confirmation.
func (s *server) verifyRefused(c echo.Context, id string, err error) error {
	code := billing.ErrorCode(err)
	if httpedge.StatusOf(err) >= 500 {
		s.log.ErrorContext(c.Request().Context(), "verification page", "request_id", requestID(c), "err", err)
	}
	return s.renderVerify(c, verifyView{Title: "Cannot confirm this change", Failed: true, ID: id, Again: true,
		Message: billing.PublicMessage(err) + " (" + string(code) + ")"})
}

// renderVerify answers with the page, always 200: these are pages for
// people, and the edge turns every non-JSON 4xx/5xx into the API's error
// envelope (contract §6). A refusal is stated on the page.
func (s *server) renderVerify(c echo.Context, v verifyView) error {
	v.AssetVersion = assetVersion()
	var page bytes.Buffer
	if err := verifyTemplate.Execute(&page, v); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, page.Bytes())
}

// personOf is the person of a verification sign-in.
func personOf(ws *websession.Session, c echo.Context) billing.Person {
	return billing.Person{Subject: ws.Subject, Org: ws.Org, Client: ws.Client, RequestID: requestID(c),
		Auth: billing.Authentication{AuthTime: ws.VerifyAuthTime, ACR: ws.VerifyACR}}
}

// signInPage is a short HTML answer of the sign-in routes.
func (s *server) signInPage(c echo.Context, message string) error {
	return s.renderVerify(c, verifyView{Title: "Sign-in", Failed: true, Message: message})
}

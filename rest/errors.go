package rest

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/httpedge"
)

// errorHandler renders every error, billing's and Echo's own (unknown route,
// wrong method), as the contract's envelope, with the edge's one table from
// codes to statuses.
func (s *server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	err = fromEcho(err)
	if httpedge.StatusOf(err) >= 500 {
		s.log.ErrorContext(c.Request().Context(), "request failed", "request_id", requestID(c), "code", billing.ErrorCode(err), "err", err)
	}
	if stepUp := billing.StepUpOf(err); stepUp != nil {
		metadata := s.PublicBaseURL + "/.well-known/oauth-protected-resource"
		c.Response().Header().Set("WWW-Authenticate", httpedge.StepUpChallenge(stepUp, metadata))
	}
	httpedge.WriteError(c.Response(), c.Request(), err)
}

// fromEcho maps Echo's own errors, and a body over the edge's limit, onto
// billing codes.
func fromEcho(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB")
	}
	var he *echo.HTTPError
	if !errors.As(err, &he) {
		return err
	}
	switch he.Code {
	case http.StatusNotFound:
		return billing.Errorf(billing.CodeNotFound, "no such endpoint")
	case http.StatusMethodNotAllowed:
		return billing.Errorf(billing.CodeInvalidRequest, "method not allowed on this endpoint")
	case http.StatusRequestEntityTooLarge:
		return billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB")
	case http.StatusUnauthorized:
		return billing.Errorf(billing.CodeUnauthorized, "missing or invalid access token")
	case http.StatusBadRequest:
		return billing.Errorf(billing.CodeInvalidRequest, "malformed request")
	default:
		return &billing.Error{Code: billing.CodeInternal, Message: "internal error", Err: err}
	}
}

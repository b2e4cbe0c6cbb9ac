package rest

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

// statusOf is the one table from billing error codes to HTTP statuses.
var statusOf = map[billing.Code]int{
	billing.CodeInvalidRequest:                 http.StatusBadRequest,
	billing.CodeUnauthorized:                   http.StatusUnauthorized,
	billing.CodeInsufficientUserAuthentication: http.StatusUnauthorized,
	billing.CodePaymentFailed:                  http.StatusPaymentRequired,
	billing.CodeInsufficientScope:              http.StatusForbidden,
	billing.CodeOperationDenied:                http.StatusForbidden,
	billing.CodeNotFound:                       http.StatusNotFound,
	billing.CodeTokenInvalid:                   http.StatusConflict,
	billing.CodeTokenMismatch:                  http.StatusConflict,
	billing.CodeApprovalPending:                http.StatusConflict,
	billing.CodeApprovalRejected:               http.StatusConflict,
	billing.CodeTokenExpired:                   http.StatusGone,
	billing.CodeRequestTooLarge:                http.StatusRequestEntityTooLarge,
	billing.CodeUnknownPlan:                    http.StatusUnprocessableEntity,
	billing.CodeInvalidPlanChange:              http.StatusUnprocessableEntity,
	billing.CodeRateLimited:                    http.StatusTooManyRequests,
	billing.CodeInternal:                       http.StatusInternalServerError,
	billing.CodeUpstreamUnavailable:            http.StatusServiceUnavailable,
}

// errorBody is the contract's error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      billing.Code `json:"code"`
	Message   string       `json:"message"`
	RequestID string       `json:"request_id"`
}

// errorHandler renders every error, billing's and Echo's own (unknown route,
// body too large), as the contract's envelope.
func (s *server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	err = fromEcho(err)
	code := billing.ErrorCode(err)
	status := statusOf[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if status >= 500 {
		s.log.ErrorContext(c.Request().Context(), "request failed", "request_id", requestID(c), "code", code, "err", err)
	}
	if stepUp := billing.StepUpOf(err); stepUp != nil {
		c.Response().Header().Set("WWW-Authenticate", s.stepUpChallenge(stepUp))
	}
	if wait := billing.RetryAfter(err); wait > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	} else if code == billing.CodeUpstreamUnavailable {
		c.Response().Header().Set("Retry-After", "1")
	}
	body := errorBody{Error: errorDetail{Code: code, Message: billing.PublicMessage(err), RequestID: requestID(c)}}
	if err := c.JSON(status, body); err != nil {
		s.log.Error("write error response", "err", err)
	}
}

// fromEcho maps Echo's own errors onto billing codes.
func fromEcho(err error) error {
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

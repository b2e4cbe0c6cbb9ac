package httpedge

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/requestid"
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
	billing.CodeSubscriptionInactive:           http.StatusConflict,
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

// StatusOf is the HTTP status of err's code (500 for a code without one).
func StatusOf(err error) int {
	if status := statusOf[billing.ErrorCode(err)]; status != 0 {
		return status
	}
	return http.StatusInternalServerError
}

// Envelope is the contract's error body.
type Envelope struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of the envelope.
type ErrorDetail struct {
	Code      billing.Code `json:"code"`
	Message   string       `json:"message"`
	RequestID string       `json:"request_id"`
}

// WriteError answers err as the contract's envelope, with its status and,
// when it asks for one, Retry-After. Only err's public message is written.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	if wait := billing.RetryAfter(err); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	} else if billing.ErrorCode(err) == billing.CodeUpstreamUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeEnvelope(w, r, StatusOf(err), err)
}

func writeEnvelope(w http.ResponseWriter, r *http.Request, status int, err error) {
	body, _ := json.Marshal(Envelope{Error: ErrorDetail{
		Code: billing.ErrorCode(err), Message: billing.PublicMessage(err), RequestID: requestid.From(r.Context()),
	}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// errorForStatus is the error an HTTP status stands for, when a handler
// billingd does not own answered it in plain text. Its text is not kept:
// it may quote the request (the MCP SDK quotes a refused Host header).
func errorForStatus(status int) error {
	switch {
	case status == http.StatusUnauthorized:
		return billing.Errorf(billing.CodeUnauthorized, "missing or invalid access token")
	case status == http.StatusForbidden:
		return billing.Errorf(billing.CodeOperationDenied, "the request is not allowed")
	case status == http.StatusNotFound:
		return billing.Errorf(billing.CodeNotFound, "not found (an MCP session may have ended: initialize again)")
	case status == http.StatusRequestEntityTooLarge:
		return billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB")
	case status == http.StatusTooManyRequests:
		return billing.Errorf(billing.CodeRateLimited, "too many requests")
	case status == http.StatusServiceUnavailable:
		return billing.Errorf(billing.CodeUpstreamUnavailable, "temporarily unavailable")
	case status >= 500:
		return billing.Errorf(billing.CodeInternal, "internal error")
	default:
		return billing.Errorf(billing.CodeInvalidRequest, "malformed request (%d %s)", status, http.StatusText(status))
	}
}

package billing

import (
	"errors"
	"fmt"
	"time"
)

// Code is a machine-readable error code from the contract (§6). Transports map
// each code to their own representation in exactly one table.
type Code string

// The contract's error codes.
const (
	CodeInvalidRequest Code = "invalid_request"
	CodeUnauthorized   Code = "unauthorized"
	// CodeInsufficientUserAuthentication: the verify level wants a fresh
	// sign-in of the person who asked (RFC 9470).
	CodeInsufficientUserAuthentication Code = "insufficient_user_authentication"
	CodePaymentFailed                  Code = "payment_failed"
	CodeInsufficientScope              Code = "insufficient_scope"
	CodeOperationDenied                Code = "operation_denied"
	CodeNotFound                       Code = "not_found"
	CodeTokenInvalid                   Code = "consent_token_invalid"
	CodeTokenMismatch                  Code = "consent_token_mismatch"
	CodeApprovalPending                Code = "approval_pending"
	CodeApprovalRejected               Code = "approval_rejected"
	CodeTokenExpired                   Code = "consent_token_expired"
	CodeRequestTooLarge                Code = "request_too_large"
	CodeUnknownPlan                    Code = "unknown_plan"
	CodeInvalidPlanChange              Code = "invalid_plan_change"
	// CodeSubscriptionInactive: the subscription was cancelled; no
	// operation changes it any more (contract §15).
	CodeSubscriptionInactive Code = "subscription_inactive"
	CodeRateLimited          Code = "rate_limited"
	CodeInternal             Code = "internal"
	CodeUpstreamUnavailable  Code = "upstream_unavailable"
)

// Error is the one error type that crosses the service boundary. Message is
// safe to show to a client and never echoes parameter values or upstream
// error text; Err is the private cause, for logs only.
type Error struct {
	Code    Code
	Message string
	Err     error
	// RetryAfter, when set, tells the client how long to wait before trying
	// again (rate_limited).
	RetryAfter time.Duration
	// StepUp, for insufficient_user_authentication, says how the person can
	// satisfy the verify level.
	StepUp *StepUp
	// outcomeUnknown: a change was sent and is being settled
	// (errOutcomeUnknown).
	outcomeUnknown bool
}

// StepUp is what a client needs to answer insufficient_user_authentication:
// RFC 9470's challenge parameters and the verification page.
type StepUp struct {
	VerifyURL string   // the verification page of the confirmation
	ACRValues []string // acceptable acr values; empty: any
}

// StepUpOf returns the step-up an error asks for, or nil.
func StepUpOf(err error) *StepUp {
	var e *Error
	if errors.As(err, &e) {
		return e.StepUp
	}
	return nil
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a public message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// wrapErr returns an *Error with a public message and a private cause.
func wrapErr(code Code, message string, cause error) *Error {
	return &Error{Code: code, Message: message, Err: cause}
}

// ErrorCode returns the code of err: the code of an *Error in its chain,
// upstream_unavailable for ErrUnavailable, internal for anything else.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, ErrUnavailable) {
		return CodeUpstreamUnavailable
	}
	return CodeInternal
}

// RetryAfter returns the wait an error suggests, or 0.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// PublicMessage returns the client-safe message for err.
func PublicMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	if errors.Is(err, ErrUnavailable) {
		return "a service billingd depends on is unavailable; retry shortly"
	}
	return "internal error"
}

// Sentinel errors returned by the adapters behind Store and PaymentProvider.
var (
	// ErrNotFound: the row asked for does not exist (or is not the caller's).
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: a dependency (database, payment provider) could not be
	// reached or gave no definite answer; the operation may be retried.
	ErrUnavailable = errors.New("dependency unavailable")
	// ErrPaymentDeclined: the provider definitely refused the change because
	// the payment failed (e.g. card declined); nothing changed.
	ErrPaymentDeclined = errors.New("payment declined")
	// ErrProviderRejected: the provider definitely refused the request for a
	// reason other than payment; nothing changed.
	ErrProviderRejected = errors.New("provider rejected request")
	// ErrProviderFailed: the provider answered with a server error (always
	// together with ErrUnavailable). The request is over, but whether it
	// changed anything is unknown; Stripe replays such an answer for the same
	// idempotency key for 24 hours, so only a read-back can settle it.
	ErrProviderFailed = errors.New("provider failed the request")
	// ErrRecoveryPointSaved: a step failed after its recovery point was
	// committed; the confirmation is executing and will be settled.
	ErrRecoveryPointSaved = errors.New("recovery point saved")
	// ErrRateLimited: the provider refused the request with its rate limit
	// (Stripe's 429) before executing it: nothing changed, the same request
	// may be sent again later. Always together with ErrUnavailable, so that
	// whoever does not tell the two apart still retries.
	ErrRateLimited = errors.New("provider rate limit")
	// ErrConflict: a write's precondition no longer held when it was made
	// (a confirmation began executing, or the subscription changed, since
	// the state it depends on was read); nothing was written.
	ErrConflict = errors.New("conflicting change")
)

package stripepay

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
)

// providerError is what a Provider returns on failure: a short message for
// the logs, the billing sentinel that tells the caller what it may do, and
// the cause (a *stripe.Error, *url.Error, …) for errors.As. Error() is the
// short message only: stripe.Error's own text is its whole JSON body.
type providerError struct {
	msg   string
	kind  error // billing.ErrPaymentDeclined, ErrProviderRejected or ErrUnavailable
	cause error
	// answered5xx: Stripe answered with a server error, so the request is
	// over (billing.ErrProviderFailed), unlike a timeout or a 409 for a key
	// still in flight.
	answered5xx bool
	// limited: Stripe answered 429, from its rate limiter or an object lock
	// timeout, before executing anything (billing.ErrRateLimited).
	limited bool
}

func (e *providerError) Error() string { return e.msg }
func (e *providerError) Unwrap() []error {
	switch {
	case e.answered5xx:
		return []error{e.kind, billing.ErrProviderFailed, e.cause}
	case e.limited:
		return []error{e.kind, billing.ErrRateLimited, e.cause}
	}
	return []error{e.kind, e.cause}
}

// classify turns an error from stripe-go into a providerError. op says what
// was being done ("update subscription").
//
// The sentinel follows billing.PaymentProvider's promise: declined and
// rejected mean Stripe definitely refused and nothing changed; unavailable
// means the outcome is unknown and the same idempotency key may be retried.
func classify(op string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		kind := stripeErrorKind(se)
		return &providerError{msg: stripeErrorMessage(op, se, kind), kind: kind, cause: err,
			answered5xx: se.HTTPStatusCode >= 500, limited: se.HTTPStatusCode == http.StatusTooManyRequests}
	}
	// No answer from Stripe we could read: a timeout, a cancelled context, a
	// reset connection, an unreadable body. The request may or may not have
	// been executed.
	msg := fmt.Sprintf("stripe %s: %s: %v", op, truncate(err.Error(), 200), billing.ErrUnavailable)
	return &providerError{msg: msg, kind: billing.ErrUnavailable, cause: err}
}

// stripeErrorKind maps an error answer from Stripe to a billing sentinel.
func stripeErrorKind(se *stripe.Error) error {
	status := se.HTTPStatusCode
	switch {
	case se.Type == stripe.ErrorTypeCard || status == http.StatusPaymentRequired:
		return billing.ErrPaymentDeclined
	case status == http.StatusRequestTimeout,
		status == http.StatusConflict, // the same idempotency key is in flight
		// Rate limit or lock timeout: nothing was executed (ErrRateLimited
		// says so); whoever cannot tell retries it like an outage.
		status == http.StatusTooManyRequests,
		status >= 500:
		return billing.ErrUnavailable
	case status >= 400:
		return billing.ErrProviderRejected
	default:
		// Not an HTTP error status: we cannot tell what happened.
		return billing.ErrUnavailable
	}
}

// stripeErrorMessage is a one-line description of se for the logs: status,
// type, code and request id, never Stripe's message (it can quote request
// parameters) nor the JSON body.
func stripeErrorMessage(op string, se *stripe.Error, kind error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe %s: status %d type %s", op, se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		fmt.Fprintf(&b, " code %s", se.Code)
	}
	if se.DeclineCode != "" {
		fmt.Fprintf(&b, " decline_code %s", se.DeclineCode)
	}
	if se.RequestID != "" {
		fmt.Fprintf(&b, " request %s", se.RequestID)
	}
	fmt.Fprintf(&b, ": %v", kind)
	return b.String()
}

// truncate keeps error text from the network stack (which can carry a
// sample of a response body) to a log-friendly size.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Step back to a rune boundary so the result stays valid UTF-8.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

package rest

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

// WebhookParser authenticates a Stripe webhook payload by its
// Stripe-Signature header and reads the subscription change in it. relevant
// is false for events billingd acknowledges and ignores. An error wrapping
// ErrWebhookSignature means the payload is not an authentic event; any other
// error, that it is not a readable subscription event. The transport knows
// no Stripe code: internal/app binds the Stripe adapter's parser to
// STRIPE_WEBHOOK_SECRET and passes it in.
type WebhookParser func(payload []byte, signature string) (ev billing.SubscriptionEvent, relevant bool, err error)

// ErrWebhookSignature: the webhook payload's signature does not verify.
var ErrWebhookSignature = errors.New("bad webhook signature")

// stripeWebhook applies Stripe subscription events. Anything that is not a
// correctly signed event is refused with 400 and changes nothing; a failure
// to apply one is a 5xx, so that Stripe delivers it again.
func (s *server) stripeWebhook(c echo.Context) error {
	if s.ParseWebhook == nil {
		return billing.Errorf(billing.CodeUpstreamUnavailable, "webhooks are not configured (STRIPE_WEBHOOK_SECRET)")
	}
	payload, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return readError(err)
	}
	ev, relevant, err := s.ParseWebhook(payload, c.Request().Header.Get("Stripe-Signature"))
	if errors.Is(err, ErrWebhookSignature) {
		s.log.WarnContext(c.Request().Context(), "webhook refused", "request_id", requestID(c), "err", err)
		return billing.Errorf(billing.CodeInvalidRequest, "invalid Stripe signature")
	}
	if err != nil {
		return billing.Errorf(billing.CodeInvalidRequest, "not a subscription event")
	}
	if !relevant {
		return c.JSON(http.StatusOK, map[string]any{"received": true})
	}
	outcome, err := s.Service.ReconcileSubscription(c.Request().Context(), ev)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"received": true, "outcome": outcome})
}

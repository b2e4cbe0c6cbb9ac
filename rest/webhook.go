package rest

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
)

// stripeWebhook applies Stripe subscription events. Anything that is not a
// correctly signed event is refused with 400 and changes nothing; a failure
// to apply one is a 5xx, so that Stripe delivers it again.
func (s *server) stripeWebhook(c echo.Context) error {
	if s.StripeWebhookSecret == "" {
		return billing.Errorf(billing.CodeUpstreamUnavailable, "webhooks are not configured (STRIPE_WEBHOOK_SECRET)")
	}
	payload, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return readError(err)
	}
	ev, relevant, err := stripepay.ParseSubscriptionEvent(payload, c.Request().Header.Get("Stripe-Signature"), s.StripeWebhookSecret)
	if errors.Is(err, stripepay.ErrBadSignature) {
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

package rest

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/webhooks"
)

// WebhookEndpoints manages an org's outbound webhook endpoints (contract
// §10; internal/webhooks holds every rule).
type WebhookEndpoints interface {
	Create(ctx context.Context, caller billing.Caller, req webhooks.CreateRequest) (webhooks.Endpoint, error)
	List(ctx context.Context, caller billing.Caller) ([]webhooks.Endpoint, error)
	Delete(ctx context.Context, caller billing.Caller, id string) error
	RotateSecret(ctx context.Context, caller billing.Caller, id string) (webhooks.Endpoint, error)
}

// mountWebhookEndpoints adds the endpoints' routes (billing:admin); without
// WebhookEndpoints they answer not_found.
func (s *server) mountWebhookEndpoints(api *echo.Group, admin echo.MiddlewareFunc) {
	if s.WebhookEndpoints == nil {
		s.WebhookEndpoints = noEndpoints{}
	}
	api.POST("/webhook-endpoints", s.createWebhookEndpoint, admin)
	api.GET("/webhook-endpoints", s.listWebhookEndpoints, admin)
	api.DELETE("/webhook-endpoints/:id", s.deleteWebhookEndpoint, admin)
	api.POST("/webhook-endpoints/:id/rotate-secret", s.rotateWebhookSecret, admin)
}

func (s *server) createWebhookEndpoint(c echo.Context) error {
	var req webhooks.CreateRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	e, err := s.WebhookEndpoints.Create(c.Request().Context(), callerOf(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, e)
}

func (s *server) listWebhookEndpoints(c echo.Context) error {
	es, err := s.WebhookEndpoints.List(c.Request().Context(), callerOf(c))
	if err != nil {
		return err
	}
	if es == nil {
		es = []webhooks.Endpoint{}
	}
	return c.JSON(http.StatusOK, map[string]any{"webhook_endpoints": es})
}

func (s *server) deleteWebhookEndpoint(c echo.Context) error {
	if err := s.WebhookEndpoints.Delete(c.Request().Context(), callerOf(c), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *server) rotateWebhookSecret(c echo.Context) error {
	if err := decodeOptional(c.Request().Body); err != nil {
		return err
	}
	e, err := s.WebhookEndpoints.RotateSecret(c.Request().Context(), callerOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

// noEndpoints serves a server built without outbound webhooks.
type noEndpoints struct{}

var errNoEndpoints = billing.Errorf(billing.CodeNotFound, "outbound webhooks are not available")

func (noEndpoints) Create(context.Context, billing.Caller, webhooks.CreateRequest) (webhooks.Endpoint, error) {
	return webhooks.Endpoint{}, errNoEndpoints
}
func (noEndpoints) List(context.Context, billing.Caller) ([]webhooks.Endpoint, error) {
	return nil, errNoEndpoints
}
func (noEndpoints) Delete(context.Context, billing.Caller, string) error { return errNoEndpoints }
func (noEndpoints) RotateSecret(context.Context, billing.Caller, string) (webhooks.Endpoint, error) {
	return webhooks.Endpoint{}, errNoEndpoints
}

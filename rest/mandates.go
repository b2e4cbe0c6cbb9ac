package rest

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

// Standing mandates (contract §13): the transport only decodes and
// encodes; who may grant, the bounds and their checks are billing's
// (billing/mandate.go).

// mandateBody is POST /api/billing/mandates. Every bound is required:
// pointers tell a bound left out from a zero.
type mandateBody struct {
	Client            string              `json:"client"`
	Operations        []billing.Operation `json:"operations"`
	ToPlans           []string            `json:"to_plans"`
	MaxAmountDueCents *int64              `json:"max_amount_due_cents"`
	BudgetCents       *int64              `json:"budget_cents"`
	MaxChanges        *int                `json:"max_changes"`
	ExpiresAt         *string             `json:"expires_at"`
	MaxQuantity       *int64              `json:"max_quantity"` // with change_seats only
}

func (b mandateBody) request() (billing.MandateRequest, error) {
	req := billing.MandateRequest{Client: b.Client, Operations: b.Operations, ToPlans: b.ToPlans,
		MaxAmountDueCents: b.MaxAmountDueCents, BudgetCents: b.BudgetCents, MaxChanges: b.MaxChanges, MaxQuantity: b.MaxQuantity}
	if b.ExpiresAt != nil {
		at, err := time.Parse(time.RFC3339, *b.ExpiresAt)
		if err != nil {
			return req, billing.Errorf(billing.CodeInvalidRequest, "expires_at must be an RFC 3339 time")
		}
		req.ExpiresAt = &at
	}
	return req, nil
}

func (s *server) grantMandate(c echo.Context) error {
	var body mandateBody
	if err := decodeStrict(c.Request().Body, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	m, err := s.Service.GrantMandate(c.Request().Context(), callerOf(c), req)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, m)
}

func (s *server) listMandates(c echo.Context) error {
	list, err := s.Service.Mandates(c.Request().Context(), callerOf(c))
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, map[string]any{"mandates": list})
}

func (s *server) revokeMandate(c echo.Context) error {
	m, err := s.Service.RevokeMandate(c.Request().Context(), callerOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, m)
}

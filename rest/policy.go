package rest

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

func (s *server) getPolicy(c echo.Context) error {
	p, err := s.Service.Policy(c.Request().Context(), callerOf(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

func (s *server) putPolicy(c echo.Context) error {
	var p billing.Policy
	if err := decodeStrict(c.Request().Body, &p); err != nil {
		return err
	}
	saved, err := s.Service.SetPolicy(c.Request().Context(), callerOf(c), p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, saved)
}

// decideApproval serves approve and reject: an admin's out-of-band answer to
// a confirmation the org's policy holds for approval.
func (s *server) decideApproval(approve bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := decodeOptional(c.Request().Body); err != nil {
			return err
		}
		decide := s.Service.Reject
		if approve {
			decide = s.Service.Approve
		}
		view, err := decide(c.Request().Context(), callerOf(c), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, view)
	}
}

package rest

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

func (s *server) plans(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"plans": s.Service.Plans()})
}

func (s *server) subscription(c echo.Context) error {
	sub, err := s.Service.Subscription(c.Request().Context(), callerOf(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sub)
}

// changeBody is the body of both handshake calls of every gated
// operation: a plan change names "to", change_seats "quantity" (billing
// refuses the other's field).
type changeBody struct {
	To           string `json:"to"`
	Quantity     int64  `json:"quantity"`
	Reason       string `json:"reason"`  // cancel_subscription's feedback
	Comment      string `json:"comment"` // and comment
	ConfirmToken string `json:"confirm_token"`
	At           string `json:"at"` // "now" (default) or "period_end" (downgrades, fewer seats)
}

func (s *server) changePlan(op billing.Operation) echo.HandlerFunc {
	return func(c echo.Context) error {
		res, err := s.handshake(c, op)
		if s.Observer != nil {
			s.Observer.ObserveHandshake(op, res, fromEcho(err))
		}
		if err != nil {
			return err
		}
		status := http.StatusOK
		if res.Proposed() {
			status = http.StatusAccepted
		}
		c.Response().Header().Set("Cache-Control", "no-store") // the body may carry a token
		return c.JSON(status, res)
	}
}

// handshake decodes a call of a gated operation and makes it.
func (s *server) handshake(c echo.Context, op billing.Operation) (billing.ChangeResult, error) {
	var body changeBody
	if err := decodeStrict(c.Request().Body, &body); err != nil {
		return billing.ChangeResult{}, err
	}
	return s.Service.ChangePlan(c.Request().Context(), callerOf(c),
		billing.ChangeRequest{Operation: op, To: body.To, Quantity: body.Quantity, At: body.At, ConfirmToken: body.ConfirmToken,
			Reason: body.Reason, Comment: body.Comment})
}

func (s *server) confirmations(c echo.Context) error {
	list, err := s.Service.PendingConfirmations(c.Request().Context(), callerOf(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"confirmations": list})
}

func (s *server) cancel(c echo.Context) error {
	if err := decodeOptional(c.Request().Body); err != nil {
		return err
	}
	res, err := s.Service.Cancel(c.Request().Context(), callerOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *server) audit(c echo.Context) error {
	limit, err1 := queryInt(c, "limit")
	before, err2 := queryInt(c, "before")
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	events, err := s.Service.AuditLog(c.Request().Context(), callerOf(c), int(limit), before)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"events": events})
}

func queryInt(c echo.Context, name string) (int64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, billing.Errorf(billing.CodeInvalidRequest, "%s must be a non-negative integer", name)
	}
	return n, nil
}

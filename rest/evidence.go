package rest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
)

// auditExport streams the org's hash-chained audit log as JSON Lines, oldest
// first, and ends it with the signed checkpoint of its last event
// ({"checkpoint": JWS}). Once the first line is sent the status is 200; a
// failure after that aborts the connection, so that a cut-off export never
// looks complete (nor can it end in a checkpoint).
func (s *server) auditExport(c echo.Context) error {
	resp := c.Response()
	enc := json.NewEncoder(resp)
	lines := 0
	start := func() {
		resp.Header().Set(echo.HeaderContentType, "application/jsonl")
		resp.Header().Set("Cache-Control", "no-store")
		resp.WriteHeader(http.StatusOK)
	}
	checkpoint, err := s.Service.ExportAudit(c.Request().Context(), callerOf(c), func(e billing.ChainedEvent) error {
		if lines == 0 {
			start()
		}
		lines++
		if lines%256 == 0 {
			resp.Flush()
		}
		return enc.Encode(e)
	})
	switch {
	case err != nil && lines == 0:
		return err
	case err != nil:
		s.log.ErrorContext(c.Request().Context(), "audit export cut off", "request_id", requestID(c), "err", err)
		panic(http.ErrAbortHandler)
	case lines == 0:
		start()
	}
	if checkpoint == "" {
		return nil
	}
	return enc.Encode(billing.ExportCheckpointLine{Checkpoint: checkpoint})
}

// receipt answers a confirmation's signed receipt.
func (s *server) receipt(c echo.Context) error {
	r, err := s.Service.Receipt(c.Request().Context(), callerOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, r)
}

// receiptKeys publishes the receipt verification keys (a JWKS).
func (s *server) receiptKeys(c echo.Context) error {
	if s.ReceiptKeys == nil {
		return billing.Errorf(billing.CodeNotFound, "no receipt keys are published")
	}
	keys, err := s.ReceiptKeys(c.Request().Context())
	if err != nil {
		return fmt.Errorf("receipt keys: %w", err)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSON(http.StatusOK, keys)
}

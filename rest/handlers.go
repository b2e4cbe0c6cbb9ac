package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

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

// changeBody is the body of both handshake calls.
type changeBody struct {
	To           string `json:"to"`
	ConfirmToken string `json:"confirm_token"`
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

// handshake decodes a call of upgrade_plan or downgrade_plan and makes it.
func (s *server) handshake(c echo.Context, op billing.Operation) (billing.ChangeResult, error) {
	var body changeBody
	if err := decodeStrict(c.Request().Body, &body); err != nil {
		return billing.ChangeResult{}, err
	}
	return s.Service.ChangePlan(c.Request().Context(), callerOf(c),
		billing.ChangeRequest{Operation: op, To: body.To, ConfirmToken: body.ConfirmToken})
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

// decodeStrict decodes exactly one JSON object into the struct v. Unknown
// fields, fields spelt in another case ("TO"), repeated fields, wrong types,
// trailing data and an empty body are invalid_request: encoding/json alone
// accepts the case variants and lets a repeated field win silently, which
// would let a request say two things at once.
func decodeStrict(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return readError(err)
	}
	invalid := billing.Errorf(billing.CodeInvalidRequest, "request body must be one JSON object with known fields of the right types")
	if err := checkKeys(data, jsonFieldNames(v)); err != nil {
		return invalid
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid
	}
	if dec.More() || !onlyWhitespace(data[dec.InputOffset():]) {
		return invalid
	}
	return nil
}

// checkKeys requires data to be an object whose keys are all in allowed,
// exactly as spelt, each at most once.
func checkKeys(data []byte, allowed map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not an object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok || !allowed[key] || seen[key] {
			return errors.New("unknown or repeated key")
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// jsonFieldNames lists the JSON names of a struct's fields.
func jsonFieldNames(v any) map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// decodeOptional accepts an empty body or an empty JSON object.
func decodeOptional(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return readError(err)
	}
	if onlyWhitespace(data) {
		return nil
	}
	return decodeStrict(bytes.NewReader(data), &struct{}{})
}

// readError is the answer to a body that could not be read: too large
// (over the edge's limit), or broken off.
func readError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB")
	}
	return billing.Errorf(billing.CodeInvalidRequest, "could not read request body")
}

func onlyWhitespace(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }

package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// decodeStrict decodes exactly one JSON object into the struct v. At every
// depth, unknown fields, fields spelt in another case ("TO"), repeated
// fields and null where a value is required are invalid_request, as are wrong
// types, trailing data and an empty body: encoding/json alone accepts the
// case variants, lets a repeated field win silently and reads null as
// "absent", which would let a request say two things at once (or turn a
// second call into a first). The message names where the body is wrong,
// never what it says.
func decodeStrict(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return readError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkValue(dec, reflect.TypeOf(v), "request body"); err != nil {
		return billing.Errorf(billing.CodeInvalidRequest, "%v", err)
	}
	if dec.More() || !onlyWhitespace(data[dec.InputOffset():]) {
		return billing.Errorf(billing.CodeInvalidRequest, "request body must be one JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return billing.Errorf(billing.CodeInvalidRequest, "request body must be one JSON object with known fields of the right types")
	}
	return nil
}

// checkValue reads one JSON value from dec and checks its shape against t:
// objects for structs (known keys exactly as spelt, each once), arrays for
// slices, null only for pointers and slices, and the JSON kind of every
// scalar. where
// names the value in error messages (request body, rules[2].to_plans).
func checkValue(dec *json.Decoder, t reflect.Type, where string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s is not valid JSON", where)
	}
	if tok == nil {
		if t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice { // optional values and empty lists
			return nil
		}
		return fmt.Errorf("%s must not be null", where)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return fmt.Errorf("%s must be an object", where)
		}
		return checkObject(dec, t, where)
	case reflect.Slice:
		if tok != json.Delim('[') {
			return fmt.Errorf("%s must be an array", where)
		}
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return fmt.Errorf("%s must be a string", where)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return fmt.Errorf("%s must be true or false", where)
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if _, ok := tok.(json.Number); !ok {
			if _, ok := tok.(float64); !ok {
				return fmt.Errorf("%s must be a number", where)
			}
		}
	default:
		return fmt.Errorf("%s has an unsupported type", where)
	}
	return nil
}

// checkObject checks the members of an object whose '{' was read.
func checkObject(dec *json.Decoder, t reflect.Type, where string) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		field, known := fields[key]
		if err != nil || !ok || !known || seen[key] {
			return fmt.Errorf("%s has an unknown or repeated field", where)
		}
		seen[key] = true
		name := key
		if where != "request body" {
			name = where + "." + key
		}
		if err := checkValue(dec, field, name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

// jsonFields maps the JSON names of a struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = t.Field(i).Type
		}
	}
	return fields
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

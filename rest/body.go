package rest

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/billingd/billingd/billing"
)

// Request bodies are read strictly: at every depth, unknown fields, fields
// spelt in another case ("TO"), repeated fields and null where a value is
// required are invalid_request, as are wrong types, invalid UTF-8, trailing
// data and an empty body. encoding/json alone accepts the case variants,
// lets a repeated field win silently and reads null as "absent", which
// would let a request say two things at once (or turn a second call into a
// first). go-json-experiment/json (the proposed encoding/json/v2) refuses
// all of these in one pass but the null, which strictJSON adds.
var strictJSON = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.WithUnmarshalers(json.UnmarshalFromFunc(refuseNull)),
)

// errNull marks a null where the body must give a value.
var errNull = errors.New("null where a value is required")

// refuseNull is called for every value of the body before it is decoded:
// null may stand only for what may be absent, an optional value (a
// pointer) or an empty list.
func refuseNull(dec *jsontext.Decoder, v any) error {
	if dec.PeekKind() != 'n' {
		return json.SkipFunc
	}
	switch reflect.TypeOf(v).Elem().Kind() {
	case reflect.Pointer, reflect.Slice:
		return json.SkipFunc
	}
	return errNull
}

// decodeStrict decodes exactly one JSON object into the struct v. The
// message of a refusal names where the body is wrong (rules[2].to_plans),
// never what it says.
func decodeStrict(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return readError(err)
	}
	if err := json.Unmarshal(data, v, strictJSON); err != nil {
		return billing.Errorf(billing.CodeInvalidRequest, "%s", refusal(reflect.TypeOf(v), err))
	}
	return nil
}

// refusal says what is wrong with a body of type t the decoder refused,
// and where.
func refusal(t reflect.Type, err error) string {
	var syntax *jsontext.SyntacticError
	var semantic *json.SemanticError
	switch {
	case errors.As(err, &syntax) && errors.Is(syntax.Err, jsontext.ErrDuplicateName):
		return inObject(t, syntax.JSONPointer, "has a repeated field")
	case errors.As(err, &semantic) && errors.Is(semantic.Err, json.ErrUnknownName):
		return inObject(t, semantic.JSONPointer, "has an unknown field")
	case errors.As(err, &semantic) && errors.Is(semantic.Err, errNull):
		at, _ := place(t, semantic.JSONPointer)
		return at.name + " must not be null"
	case errors.As(err, &semantic) && semantic.GoType != nil:
		at, found := place(t, semantic.JSONPointer)
		return at.wrongKind(found)
	}
	return "request body must be one JSON object"
}

// inObject says what is wrong with the member at p, a name the object
// holding it refused (repeated, or unknown): "rules[0] has a repeated
// field". The decoder checks a whole value's syntax before its type, so
// the object may be one the client wrote in place of a string: then that
// is what is wrong.
func inObject(t reflect.Type, p jsontext.Pointer, wrong string) string {
	at, found := place(t, p.Parent())
	if at.whole && found.Kind() == reflect.Struct {
		return at.name + " " + wrong
	}
	return at.wrongKind(found)
}

// location is where in a request a refusal points, as billing's own
// messages name it: rules[2].to_plans.
type location struct {
	name string
	// whole: every token of the pointer named a place in the request's
	// type; else name stops at the last one that did.
	whole bool
}

// place walks p through the request's type t, field by field and index
// by index, and returns the deepest place it reaches and that place's
// type. The walk stops at a name t does not have, so a name the client
// made up is never repeated back.
func place(t reflect.Type, p jsontext.Pointer) (location, reflect.Type) {
	var b strings.Builder
	t = direct(t)
	for tok := range p.Tokens() {
		next, ok := member(t, tok)
		if !ok {
			return location{name: named(b.String())}, t
		}
		if t.Kind() == reflect.Slice {
			b.WriteString("[" + tok + "]")
		} else {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
		}
		t = direct(next)
	}
	return location{name: named(b.String()), whole: true}, t
}

// member is the type of t's element tok: a field named so in JSON, or an
// element of a list.
func member(t reflect.Type, tok string) (reflect.Type, bool) {
	switch t.Kind() {
	case reflect.Slice:
		if _, err := strconv.Atoi(tok); err == nil {
			return t.Elem(), true
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" && name == tok {
				return t.Field(i).Type, true
			}
		}
	}
	return nil, false
}

func direct(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func named(where string) string {
	if where == "" {
		return "request body"
	}
	return where
}

// wrongKind says what JSON the place of type t must hold.
func (at location) wrongKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		return at.name + " must be an object"
	case reflect.Slice:
		return at.name + " must be an array"
	case reflect.String:
		return at.name + " must be a string"
	case reflect.Bool:
		return at.name + " must be true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return at.name + " must be an integer"
	}
	return at.name + " is not valid"
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

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
		return billing.Errorf(billing.CodeInvalidRequest, "%s", refusal(err))
	}
	return nil
}

// refusal says what is wrong with a body the decoder refused, and where.
func refusal(err error) string {
	var syntax *jsontext.SyntacticError
	var semantic *json.SemanticError
	switch {
	case errors.As(err, &syntax) && errors.Is(syntax.Err, jsontext.ErrDuplicateName):
		return where(syntax.JSONPointer.Parent()) + " has a repeated field"
	case errors.As(err, &semantic) && errors.Is(semantic.Err, json.ErrUnknownName):
		return where(semantic.JSONPointer.Parent()) + " has an unknown field"
	case errors.As(err, &semantic) && errors.Is(semantic.Err, errNull):
		return where(semantic.JSONPointer) + " must not be null"
	case errors.As(err, &semantic) && semantic.GoType != nil:
		return where(semantic.JSONPointer) + " must be " + jsonKindOf(semantic.GoType)
	}
	return "request body must be one JSON object"
}

// where names the value at p as billing's own messages do:
// rules[2].to_plans. Every token of p is a field name billingd knows or an
// index: refusal drops the name of an unknown or repeated field.
func where(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	if b.Len() == 0 {
		return "request body"
	}
	return b.String()
}

// jsonKindOf is the JSON a Go type is read from, as a message says it.
func jsonKindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	}
	return "of another type"
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

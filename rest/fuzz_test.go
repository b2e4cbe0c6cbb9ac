package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
)

// FuzzDecodeStrict: decoding never panics; whatever it accepts is one JSON
// object using only the body's own field names, each once; whatever it
// refuses is invalid_request, in a message made only of the body's own
// field names, indices and billingd's words: never of what the client
// wrote.
// ownWords are all a refusal of a changeBody may say but indices.
var ownWords = strings.NewReplacer("request body", "", "must be one JSON object", "", "must be an object", "",
	"must be an array", "", "must be a string", "", "must be true or false", "", "must be an integer", "",
	"must not be null", "", "has a repeated field", "", "has an unknown field", "", "is not valid", "",
	"confirm_token", "", "quantity", "", "reason", "", "comment", "", "to", "", "at", "")

func FuzzDecodeStrict(f *testing.F) {
	for _, seed := range []string{
		`{"to":"scale"}`, `{"to":"scale","confirm_token":"pbc_x"}`, `{}`, `null`, `[]`, `{"TO":"x"}`,
		`{"to":"a","to":"b"}`, `{"to":"scale"} {}`, `{"to":1}`, "{\"to\":\"\xff\"}", `{"to":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"to":{"x":{"a":1,"a":2}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var body changeBody
		err := decodeStrict(bytes.NewReader(data), &body)
		if err != nil {
			var be *billing.Error
			if !errors.As(err, &be) || be.Code != billing.CodeInvalidRequest {
				t.Fatalf("refusal %v is not invalid_request", err)
			}
			if rest := ownWords.Replace(billing.PublicMessage(err)); strings.Trim(rest, "[]0123456789. ") != "" {
				t.Fatalf("refusal %q of %q says %q", billing.PublicMessage(err), data, rest)
			}
			return
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(data, &keys) != nil {
			t.Fatalf("accepted a body that is not an object: %q", data)
		}
		for k := range keys {
			if k != "to" && k != "confirm_token" {
				t.Fatalf("accepted unknown key %q in %q", k, data)
			}
		}
	})
}

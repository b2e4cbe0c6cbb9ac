package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/billingd/billingd/billing"
)

// FuzzDecodeStrict: decoding never panics; whatever it accepts is one JSON
// object using only the body's own field names, each once; whatever it
// refuses is invalid_request.
func FuzzDecodeStrict(f *testing.F) {
	for _, seed := range []string{
		`{"to":"scale"}`, `{"to":"scale","confirm_token":"pbc_x"}`, `{}`, `null`, `[]`, `{"TO":"x"}`,
		`{"to":"a","to":"b"}`, `{"to":"scale"} {}`, `{"to":1}`, "{\"to\":\"\xff\"}", `{"to":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var body changeBody
		err := decodeStrict(bytes.NewReader(data), &body)
		if err != nil {
			var be *billing.Error
			if !errors.As(err, &be) || be.Code != billing.CodeInvalidRequest {
				t.Fatalf("refusal %v is not invalid_request", err)
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

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
// ownWords are all the words a refusal of a changeBody may say, besides
// indices.
var ownWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields("request body must be one JSON object an array a string true or false integer " +
		"not null has repeated field unknown is valid confirm_token quantity reason comment to at") {
		ownWords[w] = true
	}
}

// saysOnlyOwnWords reports whether msg is made of ownWords and indices.
func saysOnlyOwnWords(msg string) bool {
	for _, w := range strings.FieldsFunc(msg, func(r rune) bool { return strings.ContainsRune(" .[]", r) }) {
		if !ownWords[w] && strings.Trim(w, "0123456789") != "" {
			return false
		}
	}
	return true
}

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
			if msg := billing.PublicMessage(err); !saysOnlyOwnWords(msg) {
				t.Fatalf("refusal %q of %q says what the client wrote", msg, data)
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

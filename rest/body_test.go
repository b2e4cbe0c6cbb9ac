package rest

import (
	"strings"
	"testing"

	"github.com/billingd/billingd/billing"
)

// TestDecodeStrictSaysWhereNeverWhat: every way a body can be wrong is
// invalid_request with a message that names the place, and never repeats a
// name or value the client wrote.
func TestDecodeStrictSaysWhereNeverWhat(t *testing.T) {
	for body, want := range map[string]string{
		``:                         "request body must be one JSON object",
		`null`:                     "request body must not be null",
		`[]`:                       "request body must be an object",
		`{"to":"scale"} {}`:        "request body must be one JSON object",
		`{"to":"scale"`:            "request body must be one JSON object",
		`{"TO":"secret"}`:          "request body has an unknown field",
		`{"secret":1}`:             "request body has an unknown field",
		`{"to":"a","to":"secret"}`: "request body has a repeated field",
		`{"to":null}`:              "to must not be null",
		`{"to":1}`:                 "to must be a string",
		`{"quantity":"secret"}`:    "quantity must be an integer",
		`{"quantity":1.5}`:         "quantity must be an integer",
		"{\"to\":\"\xff\"}":        "request body must be one JSON object",
		// The decoder finds a repeated name inside a value before it
		// sees that the value is of the wrong type: the type is what is
		// wrong, and the client's names stay unsaid.
		`{"to":{"secret":{"a":1,"a":2}}}`:    "to must be a string",
		`{"to":{"a":1,"a":2}}`:               "to must be a string",
		`{"quantity":[{"a":{"s":1,"s":2}}]}`: "quantity must be an integer",
		`{"to":{"123":{"a":1,"a":1}}}`:       "to must be a string",
	} {
		var v changeBody
		err := decodeStrict(strings.NewReader(body), &v)
		if billing.ErrorCode(err) != billing.CodeInvalidRequest || billing.PublicMessage(err) != want {
			t.Errorf("%q: %v, want invalid_request %q", body, err, want)
		}
	}
	for body, want := range map[string]string{
		`{"rules":[{"name":"x","action":"deny","ACTION":"allow"}]}`:                      "rules[0] has an unknown field",
		`{"rules":[{"name":"x","action":"deny"},{"name":"y","name":"z"}]}`:               "rules[1] has a repeated field",
		`{"rules":[{"name":null,"action":"allow"}]}`:                                     "rules[0].name must not be null",
		`{"rules":[{"name":"x","action":"deny","to_plans":[1]}]}`:                        "rules[0].to_plans[0] must be a string",
		`{"rules":[{"name":"x","action":"deny","approvals_required":{"s":1,"s":1}}]}`:    "rules[0].approvals_required must be an integer",
		`{"rules":[{"name":"x","action":"deny","to_plans":[{"secret":{"a":1,"a":1}}]}]}`: "rules[0].to_plans[0] must be a string",
		`{"rules":{}}`:         "rules must be an array",
		`{"daily_limit":true}`: "daily_limit must be an integer",
	} {
		var p billing.Policy
		err := decodeStrict(strings.NewReader(body), &p)
		if billing.ErrorCode(err) != billing.CodeInvalidRequest || billing.PublicMessage(err) != want {
			t.Errorf("%q: %v, want invalid_request %q", body, err, want)
		}
	}
}

// TestDecodeStrictAcceptsNullOnlyWhereAbsentIsAllowed: null stands for an
// optional value (a pointer) or an empty list, and decodes as absent.
func TestDecodeStrictAcceptsNullOnlyWhereAbsentIsAllowed(t *testing.T) {
	var p billing.Policy
	body := `{"rules":[{"name":"x","action":"deny","amount_due_above_cents":null,"to_plans":null}],"agent_clients":null}`
	if err := decodeStrict(strings.NewReader(body), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 1 || p.Rules[0].AmountDueAboveCents != nil || p.Rules[0].ToPlans != nil || p.AgentClients != nil {
		t.Fatalf("decoded %+v", p)
	}
	var c changeBody
	if err := decodeStrict(strings.NewReader(" {\"to\":\"scale\",\"quantity\":3}\n"), &c); err != nil || c.To != "scale" || c.Quantity != 3 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
}

package integration

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// The operations of contract §15 over MCP: the two calls with the Go SDK
// client, and elicitation, where billingd shows the person the summary
// itself and the agent never holds the token.

// TestMCPCancelAndResume: cancel_subscription at the period's end and
// resume_subscription, each with its two calls; get_subscription says
// the subscription ends, then that it renews.
func TestMCPCancelAndResume(t *testing.T) {
	t.Parallel()
	h, sub, _ := seatsOrg(t, "mcpend", "pro", 1)
	cs := mcpConnect(t, h.url, h.mcpUser("mcpend", "mia"), "")
	var p proposal
	structured(t, callTool(t, cs, "cancel_subscription", map[string]any{"at": "period_end", "reason": "unused"}), &p)
	if p.ConfirmToken == "" || p.Details.Cancellation != billing.CancelAtPeriodEnd || p.Details.Danger != billing.DangerReversible {
		t.Fatalf("first call: %+v", p)
	}
	// The second call must name the same "at" and reason.
	if res := callTool(t, cs, "cancel_subscription", map[string]any{"at": "now", "reason": "unused", "confirm_token": p.ConfirmToken}); !res.IsError {
		t.Fatal("a token for the period's end cancelled now")
	}
	structured(t, callTool(t, cs, "cancel_subscription", map[string]any{"at": "period_end", "reason": "unused"}), &p)
	if res := callTool(t, cs, "cancel_subscription", map[string]any{"at": "period_end", "reason": "unused", "confirm_token": p.ConfirmToken}); res.IsError {
		t.Fatalf("second call: %+v", res)
	}
	if s, _ := h.fake.Subscription(sub); !s.CancelAtPeriodEnd {
		t.Fatal("Stripe has no pending cancellation")
	}
	view := callTool(t, cs, "get_subscription", nil)
	if text, ok := view.Content[0].(*sdk.TextContent); !ok || !strings.Contains(text.Text, "unless resumed") {
		t.Fatalf("get_subscription says %+v", view.Content[0])
	}
	structured(t, callTool(t, cs, "resume_subscription", nil), &p)
	if p.ConfirmToken == "" || p.Details.Cancellation != billing.Resume {
		t.Fatalf("resume: %+v", p)
	}
	if res := callTool(t, cs, "resume_subscription", map[string]any{"confirm_token": p.ConfirmToken}); res.IsError {
		t.Fatalf("resume second call: %+v", res)
	}
	if s, _ := h.fake.Subscription(sub); s.CancelAtPeriodEnd {
		t.Fatal("Stripe still cancels at the period's end")
	}
}

// TestMCPElicitationSeatsAndCancel: with a client that shows forms,
// change_seats, cancel_subscription and resume_subscription ask the person
// themselves: the dialog is the summary, the agent sees no token, and
// accepting makes the change in the same call; declining a cancellation
// changes nothing.
func TestMCPElicitationSeatsAndCancel(t *testing.T) {
	t.Parallel()
	h, sub, _ := seatsOrg(t, "elicitseats", "pro", 2)
	for _, c := range []struct {
		tool, version string
		args          map[string]any
		answer        string
	}{
		{"change_seats", protocol20251125, map[string]any{"quantity": 4}, "accept"},
		{"cancel_subscription", protocol20251125, map[string]any{"at": "now"}, "decline"},
		// On 2026-07-28 the answer comes back in a second request that must
		// name everything the first did, the reason and comment too.
		{"cancel_subscription", protocol20260728, map[string]any{"at": "period_end", "reason": "unused", "comment": "see you"}, "accept"},
		{"resume_subscription", protocol20251125, map[string]any{}, "accept"},
	} {
		o := &host{h: h, token: h.user("elicitseats", "person-of-elicitseats"), answer: answerWith(c.answer, map[string]any{"confirm": true})}
		cs := elicitConnect(t, h.url, h.mcpUser("elicitseats", "person-of-elicitseats"), c.version, formOnly, o, false)
		var got changeOutcome
		raw := wantSuccess(t, callTool(t, cs, c.tool, c.args), &got)
		dialog, pending := o.dialog(t)
		if len(pending) != 1 || strings.Contains(string(raw), "pbc_") {
			t.Fatalf("%s: dialog %+v, pending %v, result %s", c.tool, dialog, pending, raw)
		}
		for _, summary := range pending {
			if dialog.Message != summary {
				t.Fatalf("%s: dialog %q is not the summary %q", c.tool, dialog.Message, summary)
			}
		}
		if got.elicited() != "form:"+c.answer {
			t.Fatalf("%s: elicitation %q: %s", c.tool, got.elicited(), raw)
		}
	}
	s, _ := h.fake.Subscription(sub)
	if s.Items[0].Quantity != 4 || s.Status != "active" || s.CancelAtPeriodEnd || s.CancellationDetails.Feedback != "" {
		t.Fatalf("Stripe after the dialogs: %d seats, status %s, cancel_at_period_end %v", s.Items[0].Quantity, s.Status, s.CancelAtPeriodEnd)
	}
}

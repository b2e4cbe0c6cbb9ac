package mcp

import (
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

func TestMCPElicitMode(t *testing.T) {
	proposal := billing.ChangeResult{ConfirmToken: "pbc_x"}
	approval := billing.ChangeResult{ConfirmToken: "pbc_x", ApprovalRequired: true, ApprovalURL: "https://b.example/approvals/c"}
	form := &sdk.FormElicitationCapabilities{}
	url := &sdk.URLElicitationCapabilities{}
	caps := func(e *sdk.ElicitationCapabilities) *sdk.ClientCapabilities {
		return &sdk.ClientCapabilities{Elicitation: e}
	}
	cases := []struct {
		name string
		res  billing.ChangeResult
		caps *sdk.ClientCapabilities
		want string
	}{
		{"no capabilities", proposal, nil, ""},
		{"no elicitation", proposal, &sdk.ClientCapabilities{}, ""},
		{"form", proposal, caps(&sdk.ElicitationCapabilities{Form: form}), modeForm},
		{"empty means form", proposal, caps(&sdk.ElicitationCapabilities{}), modeForm},
		{"url only", proposal, caps(&sdk.ElicitationCapabilities{URL: url}), ""},
		{"approval, url", approval, caps(&sdk.ElicitationCapabilities{Form: form, URL: url}), modeURL},
		{"approval, form only", approval, caps(&sdk.ElicitationCapabilities{Form: form}), ""},
		{"executed", billing.ChangeResult{OK: true}, caps(&sdk.ElicitationCapabilities{Form: form}), ""},
		{"noop", billing.ChangeResult{OK: true, Noop: true}, caps(&sdk.ElicitationCapabilities{Form: form}), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := elicitMode(c.res, c.caps); got != c.want {
				t.Fatalf("elicitMode = %q, want %q", got, c.want)
			}
		})
	}
}

// TestMCPElicitJudge: only an explicit accept is consent, and for the form
// only with the box ticked and nothing else.
func TestMCPElicitJudge(t *testing.T) {
	answer := func(action string, content map[string]any) *sdk.ElicitResult {
		return &sdk.ElicitResult{Action: action, Content: content}
	}
	cases := []struct {
		name string
		mode string
		res  *sdk.ElicitResult
		err  error
		want string
	}{
		{"ticked", modeForm, answer("accept", map[string]any{"confirm": true}), nil, actionAccept},
		{"unticked", modeForm, answer("accept", map[string]any{"confirm": false}), nil, actionDecline},
		{"accept without content", modeForm, answer("accept", nil), nil, actionFailed},
		{"string instead of bool", modeForm, answer("accept", map[string]any{"confirm": "true"}), nil, actionFailed},
		{"extra field", modeForm, answer("accept", map[string]any{"confirm": true, "also": 1}), nil, actionFailed},
		{"decline", modeForm, answer("decline", map[string]any{"confirm": true}), nil, actionDecline},
		{"cancel", modeForm, answer("cancel", nil), nil, actionCancel},
		{"unknown action", modeForm, answer("ACCEPT", map[string]any{"confirm": true}), nil, actionFailed},
		{"error", modeForm, answer("accept", map[string]any{"confirm": true}), errors.New("timeout"), actionFailed},
		{"nil result", modeForm, nil, nil, actionFailed},
		{"url accept", modeURL, answer("accept", nil), nil, actionAccept},
		{"url decline", modeURL, answer("decline", nil), nil, actionDecline},
		{"url error", modeURL, nil, errors.New("closed"), actionFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.mode, c.res, c.err); got != c.want {
				t.Fatalf("judge = %q, want %q", got, c.want)
			}
		})
	}
}

func TestMCPElicitParams(t *testing.T) {
	p := pending{Mode: modeForm, Proposal: billing.ChangeResult{Summary: "Upgrade Acme from Pro to Scale: $80.00 now.",
		ConfirmToken: "pbc_secret", ConfirmationID: "cnf_1", ApprovalURL: "https://b.example/approvals/cnf_1"}}
	form := elicitParams(p)
	if form.Mode != modeForm || form.Message != p.Proposal.Summary || form.URL != "" || form.RequestedSchema == nil {
		t.Fatalf("form %+v", form)
	}
	p.Mode = modeURL
	url := elicitParams(p)
	if url.Mode != modeURL || url.URL != p.Proposal.ApprovalURL || url.ElicitationID != "cnf_1" ||
		!strings.HasPrefix(url.Message, p.Proposal.Summary) || url.RequestedSchema != nil {
		t.Fatalf("url %+v", url)
	}
	for _, e := range []*sdk.ElicitParams{form, url} {
		if strings.Contains(e.Message, "pbc_") {
			t.Fatalf("token in the dialog: %q", e.Message)
		}
	}
}

func TestMCPRequestState(t *testing.T) {
	key := []byte(strings.Repeat("k", MinRequestStateKeyBytes))
	sealer, err := newStateSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	p := pending{Org: "acme", Principal: "alice", Client: "agent-a", Protocol: "2026-07-28", Mode: modeForm, NotAfter: now.Add(time.Minute),
		Proposal: billing.ChangeResult{ConfirmToken: "pbc_secret", ConfirmationID: "cnf_1", Operation: billing.OpUpgrade,
			Details: &billing.Details{To: "scale"}}}
	state, err := sealer.seal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(state, "pbc_") || strings.Contains(state, "acme") {
		t.Fatalf("state readable: %s", state)
	}
	alice := billing.Caller{Org: "acme", Principal: "alice", Client: "agent-a"}
	got, err := sealer.open(state)
	if err != nil || got.Proposal.ConfirmToken != "pbc_secret" || !got.matches(alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"}) ||
		!got.NotAfter.Equal(p.NotAfter) {
		t.Fatalf("open: %+v, %v", got, err)
	}
	other, _ := newStateSealer([]byte(strings.Repeat("o", MinRequestStateKeyBytes)))
	refused := map[string]func() (pending, error){
		"other key":     func() (pending, error) { return other.open(state) },
		"altered":       func() (pending, error) { return sealer.open(state[:20] + flip(state[20]) + state[21:]) },
		"no version":    func() (pending, error) { return sealer.open(strings.TrimPrefix(state, stateVersion)) },
		"empty":         func() (pending, error) { return sealer.open("") },
		"too long":      func() (pending, error) { return sealer.open(state + strings.Repeat("A", maxStateBytes)) },
		"not base64url": func() (pending, error) { return sealer.open(stateVersion + "!!!") },
	}
	for name, open := range refused {
		if _, err := open(); !errors.Is(err, errBadState) {
			t.Errorf("%s: %v, want errBadState", name, err)
		}
	}
	for name, c := range map[string]struct {
		caller billing.Caller
		op     billing.Operation
		to     string
	}{
		"other principal": {billing.Caller{Org: "acme", Principal: "mallory", Client: "agent-a"}, billing.OpUpgrade, "scale"},
		"other org":       {billing.Caller{Org: "evil", Principal: "alice", Client: "agent-a"}, billing.OpUpgrade, "scale"},
		"other client":    {billing.Caller{Org: "acme", Principal: "alice", Client: "agent-b"}, billing.OpUpgrade, "scale"},
		"no client":       {billing.Caller{Org: "acme", Principal: "alice"}, billing.OpUpgrade, "scale"},
		"other operation": {alice, billing.OpDowngrade, "scale"},
		"other plan":      {alice, billing.OpUpgrade, "pro"},
	} {
		if got.matches(c.caller, billing.ChangeRequest{Operation: c.op, To: c.to}) {
			t.Errorf("%s: matches", name)
		}
	}
	if _, err := newStateSealer([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// TestMCPRequestStateAskedOf: the next round must come the way the question
// went: multi-round-trip on the same protocol version, from a client
// billingd would ask the same way.
func TestMCPRequestStateAskedOf(t *testing.T) {
	form := &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}}
	formAndURL := &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}, URL: &sdk.URLElicitationCapabilities{}}
	apps := map[string]any{appsExtension: map[string]any{"mimeTypes": []any{viewMIMEType}}}
	proposal := billing.ChangeResult{ConfirmToken: "pbc_x"}
	approval := billing.ChangeResult{ConfirmToken: "pbc_x", ApprovalRequired: true}
	asked := pending{Protocol: protocol20260728, Mode: modeForm, Proposal: proposal}
	askedURL := pending{Protocol: protocol20260728, Mode: modeURL, Proposal: approval}
	cases := []struct {
		name   string
		p      pending
		client declaration
		want   bool
	}{
		{"same protocol, form", asked, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: form}}, true},
		{"form and url still asked by form", asked, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: formAndURL}}, true},
		{"url for an approval", askedURL, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: formAndURL}}, true},
		{"no capabilities", asked, declaration{protocol20260728, nil}, false},
		{"no elicitation", asked, declaration{protocol20260728, &sdk.ClientCapabilities{}}, false},
		{"url only", asked, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}}}, false},
		{"form only for a url question", askedURL, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: form}}, false},
		{"renders the view instead", asked, declaration{protocol20260728, &sdk.ClientCapabilities{Elicitation: form, Extensions: apps}}, false},
		{"2025-11-25 session", asked, declaration{"2025-11-25", &sdk.ClientCapabilities{Elicitation: form}}, false},
		{"no protocol", asked, declaration{"", &sdk.ClientCapabilities{Elicitation: form}}, false},
		{"a later protocol than asked", asked, declaration{"2027-01-01", &sdk.ClientCapabilities{Elicitation: form}}, false},
		{"a state without a mode", pending{Protocol: protocol20260728, Proposal: billing.ChangeResult{}}, declaration{protocol20260728, &sdk.ClientCapabilities{}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.askedOf(c.client); got != c.want {
				t.Fatalf("askedOf = %v, want %v", got, c.want)
			}
		})
	}
}

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
	p := pending{Org: "acme", Principal: "alice", Mode: modeForm, NotAfter: now.Add(time.Minute),
		Proposal: billing.ChangeResult{ConfirmToken: "pbc_secret", ConfirmationID: "cnf_1", Operation: billing.OpUpgrade,
			Details: &billing.Details{To: "scale"}}}
	state, err := sealer.seal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(state, "pbc_") || strings.Contains(state, "acme") {
		t.Fatalf("state readable: %s", state)
	}
	got, err := sealer.open(state, now)
	if err != nil || got.Proposal.ConfirmToken != "pbc_secret" || !got.matches(billing.Caller{Org: "acme", Principal: "alice"}, billing.OpUpgrade, "scale") {
		t.Fatalf("open: %+v, %v", got, err)
	}
	other, _ := newStateSealer([]byte(strings.Repeat("o", MinRequestStateKeyBytes)))
	refused := map[string]func() (pending, error){
		"expired":       func() (pending, error) { return sealer.open(state, now.Add(time.Minute)) },
		"other key":     func() (pending, error) { return other.open(state, now) },
		"altered":       func() (pending, error) { return sealer.open(state[:20]+flip(state[20])+state[21:], now) },
		"no version":    func() (pending, error) { return sealer.open(strings.TrimPrefix(state, stateVersion), now) },
		"empty":         func() (pending, error) { return sealer.open("", now) },
		"too long":      func() (pending, error) { return sealer.open(state+strings.Repeat("A", maxStateBytes), now) },
		"not base64url": func() (pending, error) { return sealer.open(stateVersion+"!!!", now) },
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
		"other principal": {billing.Caller{Org: "acme", Principal: "mallory"}, billing.OpUpgrade, "scale"},
		"other org":       {billing.Caller{Org: "evil", Principal: "alice"}, billing.OpUpgrade, "scale"},
		"other operation": {billing.Caller{Org: "acme", Principal: "alice"}, billing.OpDowngrade, "scale"},
		"other plan":      {billing.Caller{Org: "acme", Principal: "alice"}, billing.OpUpgrade, "pro"},
	} {
		if got.matches(c.caller, c.op, c.to) {
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

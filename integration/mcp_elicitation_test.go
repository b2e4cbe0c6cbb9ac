package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// MCP elicitation (issue 7, item 3): a client whose host can show its user a
// dialog is asked through it, on protocol 2025-11-25 by a server-to-client
// elicitation/create and on 2026-07-28 by an input request in the result.
// Only an explicit accept executes; everything else cancels; clients without
// the capability get the two-call handshake.

// host is the user side of an MCP client: it answers billingd's dialogs with
// answer and records what it was shown and what was pending meanwhile.
type host struct {
	h      *harness
	token  string // REST token of the same principal, to look at pending confirmations
	answer func(*sdk.ElicitParams) (*sdk.ElicitResult, error)

	mu      sync.Mutex
	shown   []*sdk.ElicitParams
	pending []map[string]string // id → summary, while each dialog was open
	errs    []error
}

func (o *host) elicit(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	pending, err := pendingSummaries(o.h, o.token)
	o.mu.Lock()
	o.shown = append(o.shown, req.Params)
	o.pending = append(o.pending, pending)
	if err != nil {
		o.errs = append(o.errs, err)
	}
	o.mu.Unlock()
	return o.answer(req.Params)
}

// dialog returns the one dialog the host was shown and the confirmations
// pending while it was open.
func (o *host) dialog(t *testing.T) (*sdk.ElicitParams, map[string]string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) > 0 {
		t.Fatal(o.errs[0])
	}
	if len(o.shown) != 1 {
		t.Fatalf("host was shown %d dialogs, want 1", len(o.shown))
	}
	return o.shown[0], o.pending[0]
}

func (o *host) dialogs() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.shown)
}

// answerWith always gives the same answer.
func answerWith(action string, content map[string]any) func(*sdk.ElicitParams) (*sdk.ElicitResult, error) {
	return func(*sdk.ElicitParams) (*sdk.ElicitResult, error) {
		return &sdk.ElicitResult{Action: action, Content: content}, nil
	}
}

var (
	formOnly   = &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}}
	formAndURL = &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}, URL: &sdk.URLElicitationCapabilities{}}
)

// elicitConnect connects as token on version with the given elicitation
// capabilities (nil: none, and no handler) answered by o; manual turns off
// the SDK's automatic multi-round-trip so a test can play the client.
func elicitConnect(t *testing.T, baseURL, token, version string, caps *sdk.ElicitationCapabilities, o *host, manual bool) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}}
	if caps != nil {
		opts.Capabilities.Elicitation = caps
		opts.ElicitationHandler = o.elicit
	}
	if manual {
		opts.MultiRoundTrip = &sdk.MultiRoundTripOptions{Disabled: true}
	}
	cs := mcpConnectWith(t, baseURL, token, version, opts, false)
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	return cs
}

// changeOutcome is a plan tool's result with what elicitation adds.
type changeOutcome struct {
	OK               bool   `json:"ok"`
	ConfirmToken     string `json:"confirm_token"`
	ConfirmationID   string `json:"confirmation_id"`
	Summary          string `json:"summary"`
	ApprovalRequired bool   `json:"approval_required"`
	ApprovalURL      string `json:"approval_url"`
	// The verify level's.
	VerificationRequired bool   `json:"verification_required"`
	VerifyURL            string `json:"verify_url"`
	Cancelled            bool   `json:"cancelled"`
	Subscription         *struct {
		Plan string `json:"plan"`
	} `json:"subscription"`
	Elicitation *struct {
		Mode   string `json:"mode"`
		Action string `json:"action"`
	} `json:"elicitation"`
}

func (c changeOutcome) elicited() string {
	if c.Elicitation == nil {
		return ""
	}
	return c.Elicitation.Mode + ":" + c.Elicitation.Action
}

// pendingSummaries lists the principal's pending confirmations over REST.
// It runs inside the client's dialog handler, so it returns errors instead
// of failing the test.
func pendingSummaries(h *harness, token string) (map[string]string, error) {
	req, err := http.NewRequest("GET", h.url+"/api/billing/confirmations", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct{ Confirmations []billing.ConfirmationView }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list.Confirmations {
		out[c.ID] = c.Summary
	}
	return out, nil
}

// countEvents counts the org's audit events named event.
func countEvents(h *harness, org, event string) int {
	n := 0
	for _, e := range h.auditEvents(org) {
		if e.Event == event {
			n++
		}
	}
	return n
}

var bothProtocols = []string{protocol20251125, protocol20260728}

// TestMCPElicitationConfirm: under the default policy (confirm), a client
// that can show forms gets the summary, verbatim, as a form; accepting
// executes the change in the same call, exactly once, and the agent never
// sees a token; any other answer cancels the confirmation.
func TestMCPElicitationConfirm(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cases := []struct {
		name    string
		answer  func(*sdk.ElicitParams) (*sdk.ElicitResult, error)
		execute bool
		action  string
	}{
		{"accept", answerWith("accept", map[string]any{"confirm": true}), true, "accept"},
		{"decline", answerWith("decline", nil), false, "decline"},
		{"dismiss", answerWith("cancel", nil), false, "cancel"},
		{"box left unticked", answerWith("accept", map[string]any{"confirm": false}), false, "decline"},
	}
	for i, version := range bothProtocols {
		for j, c := range cases {
			t.Run(version+"/"+c.name, func(t *testing.T) {
				org := "conf" + string(rune('a'+i)) + string(rune('a'+j))
				h.createOrg(org, "Conf", "pro")
				o := &host{h: h, token: h.user(org, "alice"), answer: c.answer}
				cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, formOnly, o, false)

				var got changeOutcome
				raw := wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &got)
				dialog, pending := o.dialog(t)
				if dialog.Mode != "form" || len(pending) != 1 || strings.Contains(dialog.Message, "pbc_") {
					t.Fatalf("dialog %+v with pending %v", dialog, pending)
				}
				for _, summary := range pending {
					if dialog.Message != summary {
						t.Fatalf("dialog message %q\nis not the summary %q", dialog.Message, summary)
					}
				}
				if strings.Contains(string(raw), "pbc_") || got.ConfirmToken != "" {
					t.Fatalf("the agent saw a token: %s", raw)
				}
				if got.elicited() != "form:"+c.action {
					t.Fatalf("elicitation %q, want form:%s: %s", got.elicited(), c.action, raw)
				}
				wantOutcome(t, h, org, got, c.execute)
				if c.execute { // the client's form, in either protocol: the client's word
					h.wantConsent(org, h.lastExecuted(org), billing.ConsentElicitationForm, billing.HumanAttested)
				}
			})
		}
	}
}

// wantOutcome checks that the change executed once, or not at all with its
// confirmation cancelled.
func wantOutcome(t *testing.T, h *harness, org string, got changeOutcome, executed bool) {
	t.Helper()
	plan := h.subscription(h.user(org, "alice"))
	runs := countEvents(h, org, billing.EventOperationExecuted)
	if executed {
		if !got.OK || got.Subscription == nil || got.Subscription.Plan != "scale" || plan != "scale" || runs != 1 {
			t.Fatalf("want executed once: %+v, plan %s, %d executions", got, plan, runs)
		}
		return
	}
	if got.OK || !got.Cancelled || got.ConfirmationID == "" || plan != "pro" || runs != 0 {
		t.Fatalf("want nothing executed and the confirmation cancelled: %+v, plan %s, %d executions", got, plan, runs)
	}
	if ids := h.pendingIDs(h.user(org, "alice")); len(ids) != 0 {
		t.Fatalf("still pending: %v", ids)
	}
	if names := strings.Join(eventNames(h.auditEvents(org)), " "); !strings.Contains(names, "TOKEN_REVOKED:cancelled") {
		t.Fatalf("cancellation not audited: %s", names)
	}
}

// TestMCPElicitationClientFailure: a host that fails to answer never
// executes anything. On 2025-11-25 billingd sees the error and cancels; on
// 2026-07-28 the client gives up before its next round, so billingd never
// hears back, and the confirmation, whose token the agent never saw,
// expires.
func TestMCPElicitationClientFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	fail := func(*sdk.ElicitParams) (*sdk.ElicitResult, error) { return nil, errors.New("host crashed") }
	for i, version := range bothProtocols {
		t.Run(version, func(t *testing.T) {
			org := "fail" + string(rune('a'+i))
			h.createOrg(org, "Fail", "pro")
			o := &host{h: h, token: h.user(org, "alice"), answer: fail}
			cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, formOnly, o, false)
			res, err := callToolErr(cs, "upgrade_plan", map[string]any{"to": "scale"})
			switch version {
			case protocol20251125:
				if err != nil {
					t.Fatal(err)
				}
				var got changeOutcome
				wantSuccess(t, res, &got)
				if got.elicited() != "form:failed" {
					t.Fatalf("elicitation %q", got.elicited())
				}
				wantOutcome(t, h, org, got, false)
			default:
				if err == nil {
					t.Fatalf("the call succeeded without an answer: %v", texts(res))
				}
				if plan := h.subscription(h.user(org, "alice")); plan != "pro" || countEvents(h, org, billing.EventOperationExecuted) != 0 {
					t.Fatalf("plan %s after a failed dialog", plan)
				}
			}
		})
	}
}

// TestMCPElicitationFallback: a client without the elicitation capability
// gets the two-call handshake on both protocols, and so does a client that
// can show forms but not URLs when the policy wants an approval.
func TestMCPElicitationFallback(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for i, version := range bothProtocols {
		t.Run(version+"/no capability", func(t *testing.T) {
			org := "plain" + string(rune('a'+i))
			h.createOrg(org, "Plain", "pro")
			cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, nil, nil, false)
			var p changeOutcome
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
			if p.ConfirmToken == "" || p.Elicitation != nil || p.OK {
				t.Fatalf("first call %+v, want a plain proposal", p)
			}
			if plan := h.subscription(h.user(org, "alice")); plan != "pro" {
				t.Fatalf("the first call changed the plan to %s", plan)
			}
			var done changeOutcome
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
			if !done.OK || done.Subscription.Plan != "scale" || done.Elicitation != nil {
				t.Fatalf("second call %+v", done)
			}
		})
		t.Run(version+"/approval without url capability", func(t *testing.T) {
			org := "formy" + string(rune('a'+i))
			h.createOrg(org, "Formy", "pro")
			h.setPolicy(org, `{"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
			o := &host{h: h, token: h.user(org, "alice"), answer: answerWith("accept", map[string]any{"confirm": true})}
			cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, formOnly, o, false)
			var p changeOutcome
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
			if !p.ApprovalRequired || p.ConfirmToken == "" || p.Elicitation != nil || o.dialogs() != 0 {
				t.Fatalf("first call %+v after %d dialogs, want a plain proposal needing approval", p, o.dialogs())
			}
			wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}),
				"approval_pending")
		})
	}
}

// TestMCPElicitationApproval: when the policy wants an approval, a client
// that can open URLs sends its user to the approval page; the call returns
// the proposal, and nothing executes until another admin approves over
// REST. Declining the page cancels the confirmation.
func TestMCPElicitationApproval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const policy = `{"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`
	for i, version := range bothProtocols {
		t.Run(version+"/approved", func(t *testing.T) {
			org := "apv" + string(rune('a'+i))
			h.createOrg(org, "Apv", "pro")
			h.setPolicy(org, policy)
			o := &host{h: h, token: h.user(org, "alice"), answer: answerWith("accept", nil)}
			cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, formAndURL, o, false)

			var p changeOutcome
			raw := wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
			dialog, pending := o.dialog(t)
			wantURL := h.url + "/approvals/" + p.ConfirmationID
			if dialog.Mode != "url" || dialog.URL != wantURL || dialog.ElicitationID != p.ConfirmationID ||
				!strings.HasPrefix(dialog.Message, pending[p.ConfirmationID]) || pending[p.ConfirmationID] == "" {
				t.Fatalf("dialog %+v, want the approval page %s", dialog, wantURL)
			}
			if !p.ApprovalRequired || p.ApprovalURL != wantURL || p.ConfirmToken == "" || p.elicited() != "url:accept" {
				t.Fatalf("first call %s", raw)
			}
			second := map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}
			wantToolError(t, callTool(t, cs, "upgrade_plan", second), "approval_pending")
			if plan := h.subscription(h.user(org, "alice")); plan != "pro" {
				t.Fatalf("executed before approval: %s", plan)
			}
			r := h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin(org, "boss"), nil)
			wantStatus(t, r, http.StatusOK, "")
			var done changeOutcome
			wantSuccess(t, callTool(t, cs, "upgrade_plan", second), &done)
			wantOutcome(t, h, org, done, true)
		})
		t.Run(version+"/declined", func(t *testing.T) {
			org := "apd" + string(rune('a'+i))
			h.createOrg(org, "Apd", "pro")
			h.setPolicy(org, policy)
			o := &host{h: h, token: h.user(org, "alice"), answer: answerWith("decline", nil)}
			cs := elicitConnect(t, h.url, h.mcpUser(org, "alice"), version, formAndURL, o, false)
			var got changeOutcome
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &got)
			if got.elicited() != "url:decline" || got.ConfirmToken != "" {
				t.Fatalf("declined approval page: %+v", got)
			}
			wantOutcome(t, h, org, got, false)
			r := h.do("POST", "/api/billing/confirmations/"+got.ConfirmationID+"/approve", h.admin(org, "boss"), nil)
			wantStatus(t, r, http.StatusConflict, "consent_token_invalid")
		})
	}
}

// TestMCPElicitationRequestState plays a 2026-07-28 client by hand: the
// request state is sealed (no token readable in it), bound to the principal
// and the arguments, refused when altered, useless once used, and opens on
// another replica that shares MCP_REQUEST_STATE_KEY.
func TestMCPElicitationRequestState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("MCP_REQUEST_STATE_KEY", "an-integration-test-key-of-enough-bytes"))
	other := h.replica()
	accept := sdk.InputResponseMap{"billingd_consent": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}}
	args := map[string]any{"to": "scale"}

	// firstRound makes the first call and returns its request state.
	firstRound := func(t *testing.T, cs *sdk.ClientSession) (string, sdk.InputRequestMap) {
		t.Helper()
		res := callTool(t, cs, "upgrade_plan", args)
		if !res.NeedsInput() || res.RequestState == "" || len(res.Content) != 0 {
			t.Fatalf("first round: needs input %v, state %q, content %v", res.NeedsInput(), res.RequestState, texts(res))
		}
		return res.RequestState, res.InputRequests
	}
	nextRound := func(t *testing.T, cs *sdk.ClientSession, args map[string]any, state string, answers sdk.InputResponseMap) *sdk.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "upgrade_plan", Arguments: args, InputResponses: answers, RequestState: state})
		if err != nil {
			t.Fatalf("next round: %v", err)
		}
		return res
	}
	connect := func(t *testing.T, baseURL, org, principal string) *sdk.ClientSession {
		return elicitConnect(t, baseURL, h.mcpUser(org, principal), protocol20260728, formOnly, nil, true)
	}

	t.Run("sealed, and accepted on another replica", func(t *testing.T) {
		h.createOrg("rsok", "Rsok", "pro")
		state, requests := firstRound(t, connect(t, h.url, "rsok", "alice"))
		form, ok := requests["billingd_consent"].(*sdk.ElicitParams)
		if !ok || form.Mode != "form" || form.Message == "" {
			t.Fatalf("input requests %+v", requests)
		}
		if strings.Contains(state, "pbc_") || strings.Contains(state, "rsok") || strings.Contains(state, "alice") {
			t.Fatalf("request state readable: %s", state)
		}
		onOther := connect(t, other.url, "rsok", "alice")
		var got changeOutcome
		wantSuccess(t, nextRound(t, onOther, args, state, accept), &got)
		wantOutcome(t, h, "rsok", got, true)
		// The state is spent with its token: sent again, it gets the
		// original answer, replayed, and nothing executes again.
		var again executed
		wantSuccess(t, nextRound(t, onOther, args, state, accept), &again)
		if !again.Replayed {
			t.Fatalf("the spent state executed again or answered %+v", again)
		}
		if n := countEvents(h, "rsok", billing.EventOperationExecuted); n != 1 {
			t.Fatalf("%d executions", n)
		}
	})

	refusals := []struct {
		name  string
		state func(string) string
		who   string
		args  map[string]any
		code  string
	}{
		{"a byte changed", flipByte, "alice", args, "consent_token_invalid"},
		{"truncated", func(s string) string { return s[:len(s)-4] }, "alice", args, "consent_token_invalid"},
		{"made up", func(string) string { return "v1.AAAA" }, "alice", args, "consent_token_invalid"},
		{"missing", func(string) string { return "" }, "alice", args, "consent_token_invalid"},
		{"another principal", keep, "mallory", args, "consent_token_invalid"},
		{"other arguments", keep, "alice", map[string]any{"to": "free"}, "consent_token_invalid"},
		{"with a confirm_token", keep, "alice", map[string]any{"to": "scale", "confirm_token": "pbc_x"}, "invalid_request"},
	}
	for i, c := range refusals {
		t.Run("refused: "+c.name, func(t *testing.T) {
			org := "rsbad" + string(rune('a'+i))
			h.createOrg(org, "Rsbad", "pro")
			state, _ := firstRound(t, connect(t, h.url, org, "alice"))
			wantToolError(t, nextRound(t, connect(t, h.url, org, c.who), c.args, c.state(state), accept), c.code)
			if plan := h.subscription(h.user(org, "alice")); plan != "pro" || countEvents(h, org, billing.EventOperationExecuted) != 0 {
				t.Fatalf("executed with a refused request state: plan %s", plan)
			}
		})
	}

	malformed := map[string]sdk.InputResponseMap{
		"accept without content": {"billingd_consent": &sdk.ElicitResult{Action: "accept"}},
		"accept with a string":   {"billingd_consent": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": "yes"}}},
		"unknown action":         {"billingd_consent": &sdk.ElicitResult{Action: "approve"}},
		"wrong input id":         {"other": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}},
		"no answer":              nil,
	}
	i := 0
	for name, answers := range malformed {
		i++
		t.Run("malformed answer: "+name, func(t *testing.T) {
			org := "rsmal" + string(rune('a'+i))
			h.createOrg(org, "Rsmal", "pro")
			cs := connect(t, h.url, org, "alice")
			state, _ := firstRound(t, cs)
			var got changeOutcome
			wantSuccess(t, nextRound(t, cs, args, state, answers), &got)
			if got.elicited() != "form:failed" {
				t.Fatalf("elicitation %q", got.elicited())
			}
			wantOutcome(t, h, org, got, false)
		})
	}
}

func keep(s string) string { return s }

// flipByte changes one character in the middle of the sealed part.
func flipByte(s string) string {
	b := []byte(s)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

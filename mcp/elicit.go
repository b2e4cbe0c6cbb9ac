package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// Elicitation: when the client can show its user a dialog, upgrade_plan and
// downgrade_plan ask the user themselves instead of handing the agent a
// confirm_token and trusting it to relay the summary and the answer.
//
//   - confirm (the policy's default): a form elicitation whose message is
//     the summary, verbatim, with one checkbox. Only an accept with the box
//     ticked executes, in the same tool call, with the token the first round
//     obtained; the agent never sees that token. Anything else (decline,
//     cancel, an unticked box, a malformed answer, an error, no answer
//     before the confirmation expires) cancels the confirmation and returns
//     a result that says nothing changed.
//   - approve: a URL elicitation pointing the user to the approval page.
//     The approver must be another person, so the tool does not wait for
//     the approval (minutes, maybe hours, on a held-open request that a
//     proxy or a stateless replica would cut): after an accept it returns
//     the usual proposal, approval_required and confirm_token included, and
//     the agent makes the second call once approved; billing answers
//     approval_pending until then, so nothing runs unapproved. Declining
//     cancels the confirmation, as for confirm.
//
// Clients that do not advertise the capability (form, or url for approve)
// get the two-call handshake unchanged, as does a second call that carries
// a confirm_token.
//
// Two protocols, one flow (ask, then conclude):
//
//   - 2025-11-25 and older: the tool sends elicitation/create to the client
//     over the session and waits for the answer in the same call.
//   - 2026-07-28 (SEP-2322, multi-round-trip): the tool returns the
//     elicitation as an input request with a request state; the client asks
//     its user and calls the tool again with the answer and the state. The
//     state holds the proposal, token included, sealed by stateSealer, and
//     is bound to the caller (org, principal, client), the call's
//     arguments, the protocol version and the capability it asked through:
//     it is never trusted as sent.
//
// Every rule of the handshake stays in billing: this file only calls
// ChangePlan (the first call, and the second with the token the first one
// returned) and Cancel.

// Elicitation modes (MCP 2025-11-25), and billingd's own view (apps.go):
// the ways billingd puts a proposal to the person through the client.
const (
	modeForm = "form"
	modeURL  = "url"
	modeView = "view"
)

// What the user did with the dialog, as the result reports it.
const (
	actionAccept  = "accept"
	actionDecline = "decline"
	actionCancel  = "cancel"
	// actionFailed: no valid answer (an error, a timeout, a malformed
	// response).
	actionFailed = "failed"
)

const (
	// consentField is the form's one field: ticked, the user agrees.
	consentField = "confirm"
	// inputKey names billingd's input request in a multi-round-trip result.
	inputKey = "billingd_consent"
	// cancelTimeout bounds cancelling a confirmation after the client went
	// away.
	cancelTimeout = 10 * time.Second
)

// elicitationReport tells the agent that billingd asked the user itself, and
// what came of it.
type elicitationReport struct {
	Mode   string `json:"mode" jsonschema:"form: billingd showed the user the summary and asked for consent; url: billingd sent the user to the approval page"`
	Action string `json:"action" jsonschema:"what the user did: accept, decline, cancel, or failed (no valid answer)"`
}

// changeOutput is the result of upgrade_plan and downgrade_plan: the REST
// handshake body, plus, when billingd asked the user through the client,
// the elicitation's outcome.
type changeOutput struct {
	billing.ChangeResult
	// Cancelled: the user did not accept the dialog, so the confirmation
	// was cancelled and nothing changed.
	Cancelled   bool               `json:"cancelled,omitempty"`
	Elicitation *elicitationReport `json:"elicitation,omitempty"`
}

// elicitMode is how billingd asks the user about res through a client with
// caps: modeForm for a change that needs confirmation, modeURL for one that
// needs approval, "" for the two-call handshake (not a proposal, or the
// client cannot show that kind of dialog).
func elicitMode(res billing.ChangeResult, caps *sdk.ClientCapabilities) string {
	if !res.Proposed() || caps == nil || caps.Elicitation == nil {
		return ""
	}
	e := caps.Elicitation
	switch {
	case (res.ApprovalRequired || res.VerificationRequired) && e.URL != nil:
		return modeURL
	case res.ApprovalRequired || res.VerificationRequired:
		return "" // a form cannot do what the approval or verification page does
	case e.Form != nil || e.URL == nil: // {} is form, for clients older than 2025-11-25
		return modeForm
	}
	return ""
}

// howToAsk is how billingd puts res to the person through a client with
// caps: in its own view (a client that renders MCP Apps), in a dialog
// (elicitMode), or "" for the two-call handshake. The next round of a
// request state must come from a client that would be asked the same way.
func howToAsk(res billing.ChangeResult, caps *sdk.ClientCapabilities) string {
	if res.Proposed() && supportsApps(caps) {
		return modeView
	}
	return elicitMode(res, caps)
}

// elicitParams is the dialog for p.
func elicitParams(p pending) *sdk.ElicitParams {
	if p.Mode == modeURL && p.Proposal.VerificationRequired {
		// The page checks who opens it: the URL is never pre-authenticated.
		return &sdk.ElicitParams{
			Mode: modeURL, URL: p.Proposal.VerifyURL, ElicitationID: p.Proposal.ConfirmationID,
			Message: p.Proposal.Summary + "\n\nThe organisation's policy requires you to sign in again and confirm this change " +
				"on billingd's verification page before it can run.",
		}
	}
	if p.Mode == modeURL {
		return &sdk.ElicitParams{
			Mode: modeURL, URL: p.Proposal.ApprovalURL, ElicitationID: p.Proposal.ConfirmationID,
			Message: p.Proposal.Summary + "\n\nThe organisation's policy requires " + approversText(p.Proposal.Details) + " to approve " +
				"this change on the approval page before it can run. Open the page to follow the approval or to share it with an approver.",
		}
	}
	// The message is the summary and nothing else: it is what the user
	// agrees to, word for word.
	return &sdk.ElicitParams{Mode: modeForm, Message: p.Proposal.Summary, RequestedSchema: consentSchema()}
}

// consentSchema is the form: one required checkbox.
func consentSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			consentField: {Type: "boolean", Title: "Make this change",
				Description: "Tick to make exactly the change described above. Leave it unticked, or decline, to change nothing."},
		},
		Required: []string{consentField},
	}
}

// judge reads the user's answer to the dialog. Only an explicit accept
// counts, and for the form only with the box ticked; an error or a
// malformed answer is actionFailed, never consent.
func judge(mode string, res *sdk.ElicitResult, err error) string {
	switch {
	case err != nil || res == nil:
		return actionFailed
	case res.Action == actionDecline || res.Action == actionCancel:
		return res.Action
	case res.Action != actionAccept:
		return actionFailed
	case mode == modeURL:
		return actionAccept // the page, not this answer, is where approval happens
	}
	ticked, ok := res.Content[consentField].(bool)
	switch {
	case !ok || len(res.Content) != 1:
		return actionFailed
	case ticked:
		return actionAccept
	default:
		return actionDecline
	}
}

// ask puts p to the user: as an input request on 2026-07-28, or over the
// session on older protocols, waiting at most until the confirmation
// expires.
func (t tools) ask(ctx context.Context, req *sdk.CallToolRequest, client declaration, caller billing.Caller, p pending) (reply[changeOutput], error) {
	params := elicitParams(p)
	if client.usesInputRequests() {
		state, err := t.states.seal(p)
		if err != nil {
			return reply[changeOutput]{}, err
		}
		return reply[changeOutput]{input: &sdk.CallToolResult{
			InputRequests: sdk.InputRequestMap{inputKey: params}, RequestState: state}}, nil
	}
	wait, cancel := context.WithDeadline(ctx, *p.Proposal.ExpiresAt)
	defer cancel()
	res, err := req.Session.Elicit(wait, params)
	if err != nil {
		t.log.InfoContext(ctx, "elicitation failed", append(callAttrs(string(p.Proposal.Operation), caller, actionFailed), "err", err)...)
	}
	return t.conclude(ctx, caller, p, judge(p.Mode, res, err))
}

// isNextRound reports whether the call answers an earlier input request.
func isNextRound(req *sdk.CallToolRequest) bool {
	return req.Params.RequestState != "" || len(req.Params.InputResponses) > 0
}

// nextRound continues a call on 2026-07-28 with the client's answer. The
// request state must open with billingd's key and have been issued to this
// caller (org, principal, client) for these arguments, and the answer must
// come the way the question went: on the same protocol, from a client that
// declares the capability billingd asked through. Otherwise nothing happens
// at all. Within the state's window the answer decides (conclude); after it,
// only billing's record of the confirmation answers (lateRound).
func (t tools) nextRound(ctx context.Context, req *sdk.CallToolRequest, client declaration, caller billing.Caller, op billing.Operation, in changeArgs) (reply[changeOutput], error) {
	if in.ConfirmToken != "" {
		return reply[changeOutput]{}, billing.Errorf(billing.CodeInvalidRequest,
			"send either confirm_token or an elicitation's answer and request state, not both")
	}
	p, err := t.states.open(req.Params.RequestState)
	refused := ""
	switch {
	case err != nil:
		refused = "not_billingds"
	case !p.matches(caller, in.request(op)): // (no confirm_token: refused above)
		refused = "other_caller_or_call"
	case !p.askedOf(client):
		refused = "other_protocol_or_capability"
	}
	if refused != "" {
		t.log.WarnContext(ctx, "request state refused", append(callAttrs(string(op), caller, "bad_request_state"), "reason", refused)...)
		return reply[changeOutput]{}, billing.Errorf(billing.CodeTokenInvalid,
			"the request state is not one billingd issued to this client for this call; this call changed nothing")
	}
	if !t.now().Before(p.NotAfter) {
		return t.lateRound(ctx, caller, p)
	}
	res, err := answerIn(req.Params.InputResponses)
	return t.conclude(ctx, caller, p, judge(p.Mode, res, err))
}

// lateRound answers a next round that came after its request state's window
// (the confirmation's expiry plus the largest clock skew billing allows).
// The answer in it no longer counts, to execute or to cancel: the state's
// authority is bounded in time. But the confirmation it names is the
// caller's, and what became of it is billing's to say, whatever the state's
// age: a change that executed is answered with its original result
// ("replayed"), one whose outcome is still unknown is settled, as for any
// repeated second call of its owner. Anything else changed nothing, and the
// answer says so.
func (t tools) lateRound(ctx context.Context, caller billing.Caller, p pending) (reply[changeOutput], error) {
	change, err := t.svc.ChangeOf(ctx, caller, p.Proposal.ConfirmationID)
	if err != nil {
		return reply[changeOutput]{}, err
	}
	switch change.Status {
	case billing.StatusExecuted, billing.StatusExecuting:
		res, err := t.handshake(ctx, caller, p.secondCall())
		if err != nil {
			return reply[changeOutput]{}, err
		}
		return final(changeOutput{ChangeResult: res}, changeText(res)), nil
	}
	return reply[changeOutput]{}, billing.Errorf(billing.CodeTokenExpired,
		"this answer came after billingd's question about the change had expired, and the change was not made")
}

var errNoAnswer = errors.New("no answer to billingd's input request")

// answerIn is the answer to billingd's one input request, and nothing else.
func answerIn(responses sdk.InputResponseMap) (*sdk.ElicitResult, error) {
	res, ok := responses[inputKey].(*sdk.ElicitResult)
	if !ok || res == nil || len(responses) != 1 {
		return nil, errNoAnswer
	}
	return res, nil
}

// conclude acts on the user's answer: accept executes a confirmation (form)
// or hands the agent the proposal to redeem after approval (url); anything
// else cancels the confirmation.
func (t tools) conclude(ctx context.Context, caller billing.Caller, p pending, action string) (reply[changeOutput], error) {
	t.log.InfoContext(ctx, "elicitation", append(callAttrs(string(p.Proposal.Operation), caller, action), "mode", p.Mode)...)
	report := &elicitationReport{Mode: p.Mode, Action: action}
	if action != actionAccept {
		return t.withdraw(ctx, caller, p, report)
	}
	if p.Mode == modeURL {
		return final(changeOutput{ChangeResult: p.Proposal, Elicitation: report}, approvalText(p.Proposal)), nil
	}
	caller.Consent = billing.ConsentElicitationForm // the client's form, ticked and accepted
	res, err := t.handshake(ctx, caller, p.secondCall())
	if err != nil {
		return reply[changeOutput]{}, err
	}
	return final(changeOutput{ChangeResult: res, Elicitation: report},
		changeText(res)+" The user agreed to the summary in the confirmation dialog."), nil
}

// withdraw cancels the confirmation the user did not accept. It runs even if
// the client has gone away, so that no pending confirmation outlives a
// refusal.
func (t tools) withdraw(ctx context.Context, caller billing.Caller, p pending, report *elicitationReport) (reply[changeOutput], error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	id := p.Proposal.ConfirmationID
	if _, err := t.svc.Cancel(cctx, caller, id); err != nil {
		return reply[changeOutput]{}, err
	}
	out := changeOutput{
		ChangeResult: billing.ChangeResult{ConfirmationID: id, Operation: p.Proposal.Operation},
		Cancelled:    true, Elicitation: report,
	}
	return final(out, withdrawnText(report.Action, id)), nil
}

func withdrawnText(action, id string) string {
	why := map[string]string{
		actionDecline: "the user declined the change in the confirmation dialog",
		actionCancel:  "the user closed the confirmation dialog without agreeing",
	}[action]
	if why == "" {
		why = "the confirmation dialog got no valid answer"
	}
	return fmt.Sprintf("Nothing was changed: %s, so confirmation %s is cancelled. "+
		"Do not make this change unless the user asks for it again.", why, id)
}

func approvalText(res billing.ChangeResult) string {
	if res.VerificationRequired {
		return res.Summary + "\n\nThis change needs the user to sign in again and confirm it at " + res.VerifyURL +
			"; the user has been shown that page. Once they confirmed there, call this tool again with the same \"to\" and the confirm_token " +
			"(until then the answer is insufficient_user_authentication). If the user no longer wants it, call cancel_confirmation."
	}
	return res.Summary + "\n\nThis change needs approval by " + approversText(res.Details) + " at " + res.ApprovalURL +
		"; the user has been shown that page. Once it is approved, call this tool again with the same \"to\" and the confirm_token " +
		"(until then the answer is approval_pending; if it is not approved in time it is rejected). If the user no longer wants it, call cancel_confirmation."
}

// approversText names how many people must approve a proposal.
func approversText(d *billing.Details) string {
	if d != nil {
		if _, n, ok := d.Counts(); ok && n > 1 {
			return fmt.Sprintf("%d other billing administrators", n)
		}
	}
	return "another billing administrator"
}

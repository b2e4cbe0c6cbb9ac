package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// errorEnvelope is a failed tool call's structuredContent (contract §7).
type errorEnvelope struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    billing.Code `json:"code" jsonschema:"one of the contract's error codes, e.g. consent_token_expired"`
	Message string       `json:"message" jsonschema:"what went wrong, for humans"`
}

// nextStep is the one table from billing error codes to MCP tool results:
// the code and message are the contract's, and this adds what an agent
// should do next, in the text block. Codes without an entry need no advice.
var nextStep = map[billing.Code]string{
	billing.CodeTokenExpired:                   "Nothing was changed. If the user still wants the change, make the first call again and show them the new summary.",
	billing.CodeSubscriptionInactive:           "Nothing was changed: the subscription was cancelled and can no longer be changed. Tell the user; call get_subscription to see it.",
	billing.CodeTokenMismatch:                  "Nothing was changed: the arguments differ from the first call, or something the summary stated has changed since. Make the first call again and show the user the new summary.",
	billing.CodeTokenInvalid:                   "This call changed nothing: the token is unknown, superseded, cancelled or was used for another request (repeating the exact call that executed returns its result with replayed: true). Call get_subscription to see the current plan; if the user still wants a change, make the first call again.",
	billing.CodeApprovalPending:                "Nothing was changed yet: the organisation's policy holds the change until enough other people approve it on the approval page (approvals_given of approvals_required in the first call's details). You cannot approve it. Call this tool again with the same \"to\" and confirm_token once it is approved.",
	billing.CodeApprovalRejected:               "Nothing was changed: an approver rejected the change, or it was not approved before its approval window ended (expired). Do not retry with this token; if the user still wants the change, make the first call again.",
	billing.CodeUnknownPlan:                    "Call list_plans for the valid plan ids.",
	billing.CodeInvalidPlanChange:              "Use upgrade_plan for a more expensive plan and downgrade_plan for a cheaper one.",
	billing.CodePaymentFailed:                  "The plan was not changed; tell the user that the payment failed.",
	billing.CodeUnauthorized:                   "The access token is missing, invalid or expired: the user must sign in again.",
	billing.CodeInsufficientUserAuthentication: "Nothing was changed. Show the user the address in the message: they must open it, sign in again and confirm there. Then call this tool again with the same \"to\" and confirm_token. You cannot do this for them.",
	billing.CodeInsufficientScope:              "The access token does not grant this tool's scope: the user must authorise it.",
	billing.CodeRateLimited:                    "Wait a little before calling again.",
	billing.CodeUpstreamUnavailable:            "billingd, its database or the payment provider could not answer now. Do what the message says. If it says the outcome of a change is not known yet, do not start a new change: billingd finds out whether it was made and never makes it twice.",
}

// success is a tool result carrying out as structuredContent (set by the SDK
// from the handler's output), a text block for humans, and the serialized
// JSON for clients that read only text (the MCP spec's compatibility advice).
func success(text string, out any) *sdk.CallToolResult {
	content := []sdk.Content{&sdk.TextContent{Text: text}}
	if data, err := json.Marshal(out); err == nil {
		content = append(content, &sdk.TextContent{Text: string(data)})
	}
	return &sdk.CallToolResult{Content: content}
}

// failure turns err into an isError result. Only the public message leaves
// the process; an internal or upstream cause is logged with the request id.
func failure(ctx context.Context, log *slog.Logger, tool string, caller billing.Caller, err error) *sdk.CallToolResult {
	code := billing.ErrorCode(err)
	attrs := callAttrs(tool, caller, string(code))
	if code == billing.CodeInternal || code == billing.CodeUpstreamUnavailable {
		log.ErrorContext(ctx, "tool call failed", append(attrs, "err", err)...)
	} else {
		log.InfoContext(ctx, "tool call", attrs...)
	}
	return errorResult(code, billing.PublicMessage(err), billing.RetryAfter(err))
}

// errorResult is the one shape of a failed tool call: isError, the
// contract's envelope as structuredContent, and a text block with the code,
// the message and the next step for the agent (with REST's Retry-After, when
// there is one, in words).
func errorResult(code billing.Code, message string, retryAfter time.Duration) *sdk.CallToolResult {
	envelope := errorEnvelope{Error: errorDetail{Code: code, Message: message}}
	text := string(code) + ": " + message
	if next := nextStep[code]; next != "" {
		text += " " + next
	}
	if retryAfter > 0 {
		text += fmt.Sprintf(" Retry after %d seconds.", int(retryAfter.Round(time.Second)/time.Second))
	}
	data, _ := json.Marshal(envelope) // two strings: cannot fail
	return &sdk.CallToolResult{
		IsError:           true,
		StructuredContent: json.RawMessage(data),
		Content:           []sdk.Content{&sdk.TextContent{Text: text}, &sdk.TextContent{Text: string(data)}},
	}
}

// sdkErrorsAsContract gives the isError results the SDK makes itself, for
// arguments that fail the input schema before any tool runs, the contract's
// shape too. Their text may quote the arguments, so it is replaced.
func sdkErrorsAsContract(log *slog.Logger) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			res, err := next(ctx, method, req)
			call, isCall := req.(*sdk.CallToolRequest)
			if r, ok := res.(*sdk.CallToolResult); ok && isCall && err == nil && r.IsError && r.StructuredContent == nil {
				log.InfoContext(ctx, "tool call", "tool", call.Params.Name, "outcome", billing.CodeInvalidRequest)
				return errorResult(billing.CodeInvalidRequest, "the arguments do not match the tool's input schema (see tools/list)", 0), nil
			}
			return res, err
		}
	}
}

// callAttrs are the log attributes of a tool call: never arguments, which
// may hold a confirmation token.
func callAttrs(tool string, caller billing.Caller, outcome string) []any {
	return []any{"tool", tool, "org", caller.Org, "principal", caller.Principal, "client", caller.Client,
		"request_id", caller.RequestID, "outcome", outcome}
}

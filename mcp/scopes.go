package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/requestid"
)

// scopeGate answers a tools/call whose tool needs a scope the token lacks
// with HTTP 403 and an insufficient_scope challenge, before the SDK sees it.
//
// Scopes differ per tool (billing:read for the read tools, billing:write for
// the others), so one scope list on RequireBearerToken cannot express them:
// requiring the union would lock read-only agents out, requiring either would
// let a read-only token reach the plan tools. The contract wants a missing
// scope answered at the HTTP level so that clients can step up their
// authorization (MCP spec, "Scope Challenge Handling"), which a tool result
// cannot do. So the gate reads the JSON-RPC body, with the SDK's own decoder,
// and checks every tools/call in it against toolScopes. Other methods
// (initialize, tools/list, ping) need only a valid token. The tools check
// their scope again (callerOf), so a body the gate misreads still cannot
// reach a tool without its scope.
type scopeGate struct {
	next     http.Handler
	metadata string
}

func (g scopeGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpedge.WriteError(w, r, billing.Errorf(billing.CodeRequestTooLarge, "request body larger than 64 KiB"))
			return
		}
		httpedge.WriteError(w, r, billing.Errorf(billing.CodeInvalidRequest, "could not read request body"))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	info := sdkauth.TokenInfoFromContext(r.Context())
	for _, call := range toolCalls(body) {
		if scope := toolScopes[call.tool]; scope != "" && (info == nil || !slices.Contains(info.Scopes, scope)) {
			g.refuse(w, r, call.id, scope, info)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// rpcInsufficientScope is the JSON-RPC error code of a refused call, from the
// range JSON-RPC leaves to servers. The Go SDK matches errors by code and
// gives -32001 to -32005 and -32020 to -32022 meanings of its own (-32003 is
// "client is closing" and would end the session), so this stays clear of
// them.
const rpcInsufficientScope = -32030

// refuse answers 403 with the challenge of the MCP spec and, as the body, a
// JSON-RPC error for the call, so that a client surfaces it as that call's
// error without dropping the session. The JSON-RPC error's data is the
// contract's envelope, request id included.
func (g scopeGate) refuse(w http.ResponseWriter, r *http.Request, id jsonrpc.ID, scope string, info *sdkauth.TokenInfo) {
	refusal := billing.Errorf(billing.CodeInsufficientScope, "the access token lacks the %s scope", scope)
	w.Header().Set("WWW-Authenticate", httpedge.Challenge(r, g.metadata, refusal, scopesToRequest(info, scope)...))
	w.Header().Set("Content-Type", "application/json")
	detail := httpedge.ErrorDetail{Code: refusal.Code, Message: refusal.Message, RequestID: requestid.From(r.Context())}
	data, _ := json.Marshal(httpedge.Envelope{Error: detail})
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id,
		Error: &jsonrpc.Error{Code: rpcInsufficientScope, Message: string(detail.Code) + ": " + detail.Message, Data: data}})
	w.WriteHeader(http.StatusForbidden)
	if err == nil {
		_, _ = w.Write(body)
	}
}

// scopesToRequest is the scope parameter of an insufficient_scope challenge:
// the billing scopes the token already has plus the missing one, so that a
// client stepping up does not lose what it was granted (the MCP spec's
// recommended approach).
func scopesToRequest(info *sdkauth.TokenInfo, missing string) []string {
	var want []string
	for _, s := range []string{auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin} {
		if s == missing || info != nil && slices.Contains(info.Scopes, s) {
			want = append(want, s)
		}
	}
	return want
}

// toolCall is a tools/call request found in a body.
type toolCall struct {
	id   jsonrpc.ID
	tool string
}

// toolCalls lists the tools/call requests in a JSON-RPC body: one message or
// a batch, split the way the SDK splits it. A body the SDK cannot decode
// either yields nothing; the SDK then rejects it and no tool runs.
func toolCalls(body []byte) []toolCall {
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		raws = []json.RawMessage{body}
	}
	var calls []toolCall
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			continue
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
			calls = append(calls, toolCall{id: req.ID, tool: toolName(req.Params)})
		}
	}
	return calls
}

// toolName reads params.name by its exact key, as the SDK's case-sensitive
// decoder does.
func toolName(params json.RawMessage) string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(params, &fields); err != nil {
		return ""
	}
	var name string
	_ = json.Unmarshal(fields["name"], &name)
	return name
}

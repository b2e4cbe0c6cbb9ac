package mcp

import (
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// declaration is what a client declared about itself for a tool call: the
// protocol version it speaks and its capabilities (elicitation, extensions
// such as MCP Apps). What billingd does for a client (a view, a dialog, a
// request state) and what it accepts from one (confirm_plan_change, the
// answer to a request state) depend on it.
type declaration struct {
	protocol string
	caps     *sdk.ClientCapabilities
}

// declared reads the declaration where the SDK reads it for its own
// decisions (ServerSession.Elicit, multi-round-trip): the session's
// InitializeParams. On 2025-11-25 that is the client's initialize request;
// on 2026-07-28, where every request is a session of its own, it is this
// request's _meta (validated by the SDK: protocol version, header and
// capabilities together).
//
// Not CallToolRequest.ClientCapabilities: that reads a capabilities entry
// from any call's _meta first, so a 2025-11-25 session that declared no
// extension at initialize could claim one in a single call.
func declared(req *sdk.CallToolRequest) declaration {
	if req == nil || req.Session == nil {
		return declaration{}
	}
	p := req.Session.InitializeParams()
	if p == nil {
		return declaration{}
	}
	return declaration{protocol: p.ProtocolVersion, caps: p.Capabilities}
}

// usesInputRequests reports whether the client takes input requests in tool
// results (protocol 2026-07-28 and later). The SDK decides the same way, and
// would fulfil input requests itself for an older client.
func (d declaration) usesInputRequests() bool {
	return d.protocol >= protocol20260728
}

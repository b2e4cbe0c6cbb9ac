// Package mcp is billingd's Model Context Protocol server: the plan-change
// handshake as tools an AI agent can call (contract §7), on the official Go
// SDK (github.com/modelcontextprotocol/go-sdk, imported here as sdk).
//
// The five tools of the agent (upgrade_plan, downgrade_plan, get_subscription,
// list_plans, cancel_confirmation), and confirm_plan_change for the MCP Apps
// view, decode their typed arguments, call billing.Service and
// encode its result; every handshake rule lives in billing, so a token issued
// over MCP is redeemable over REST and the other way round. Successful
// results carry the REST body as structuredContent; failures are isError
// results with the contract's {"error":{"code","message"}}, built by the one
// mapping in results.go.
//
// For chat hosts that render MCP Apps (extension io.modelcontextprotocol/ui),
// the plan tools link billingd's own view of the proposal (mcp/appview, the
// resource ui://billingd/plan-change.html), whose Confirm button makes the
// second call through the app-only tool confirm_plan_change; such a client's
// first call carries the token only in the result's _meta, out of the
// model's reach (apps.go).
//
// Identity reaches a tool only through the SDK's token info
// (req.Extra.TokenInfo), never through an argument. Over Streamable HTTP
// (Handler) the bearer check REST uses too (internal/httpedge) verifies the
// bearer token with internal/auth, and a scope gate answers a tools/call the token's scopes do
// not cover with 403 insufficient_scope so that clients can step up. Each
// tool checks its scope and the token's expiry again, so no tool relies on
// the gate. Local agents on stdio reach this same endpoint through billingd
// mcp stdio (internal/mcpbridge), which holds only the server's URL and the
// agent's token.
//
// MCP sessions carry no authority: a confirmation is bound to the org and
// principal in billing's store, so it survives reconnects, other replicas and
// a switch to REST.
//
// Where the client supports elicitation, the plan tools ask the user through
// the client instead of trusting the agent to relay the summary (elicit.go):
// a form with the summary for a change that needs confirmation, executed in
// the same call on accept, and the approval page for one that needs
// approval. Protocol 2025-11-25 gets a server-to-client elicitation/create
// over its session (stateful handler); 2026-07-28 gets input requests and a
// request state sealed with MCP_REQUEST_STATE_KEY (stateless handler,
// state.go); one URL serves both (byProtocol). Without the capability the
// two-call handshake is unchanged, and no answer but an explicit accept
// executes anything.
package mcp

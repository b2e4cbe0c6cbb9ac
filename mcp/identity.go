package mcp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// Keys of sdkauth.TokenInfo.Extra: what billing needs from the token besides
// its scopes (UserID names the session's owner, not the principal).
const (
	extraPrincipal = "sub"
	extraOrg       = "org"
	extraClient    = "client"
	// extraAuthTime and extraACR carry auth_time and acr for the verify
	// level's step-up check.
	extraAuthTime = "auth_time"
	extraACR      = "acr"
)

// tokenInfo is the SDK's view of a verified access token. The SDK binds
// each 2025-11-25 session to the UserID of the token that opened it and
// refuses (403) a request of that session whose token has another UserID,
// so UserID is the session's owner (sessionOwner), not the principal alone:
// the same sub in another org, or through another client, must not take
// over a session. The principal travels in Extra with the org and client.
func tokenInfo(id auth.Identity) *sdkauth.TokenInfo {
	return &sdkauth.TokenInfo{
		Scopes:     id.Scopes,
		Expiration: id.Expiry,
		UserID:     sessionOwner(id),
		Extra: map[string]any{extraPrincipal: id.Subject, extraOrg: id.Org, extraClient: id.Client,
			extraAuthTime: id.AuthTime, extraACR: id.ACR},
	}
}

// sessionOwner names who may use an MCP session: the org, the principal
// and the client (azp or client_id) of the token that opened it. A session
// holds what its client declared at initialize (capabilities, extensions),
// so another client of the same person is not its owner either. The JSON
// array keeps the three apart whatever characters they hold.
func sessionOwner(id auth.Identity) string {
	owner, _ := json.Marshal([]string{id.Org, id.Subject, id.Client}) // strings: cannot fail
	return string(owner)
}

const requestIDHeader = "X-Request-Id"

// callerOf is the caller of a tool call, from the token info the transport
// attached and nothing else. It checks the token's expiry and the tool's
// scope itself: over HTTP the bearer middleware and the scope gate checked
// them already, but a session lives longer than the token that opened it,
// and a check in the tool cannot be bypassed by a request the gate misread.
func callerOf(req *sdk.CallToolRequest, scope string) (billing.Caller, error) {
	// Every MCP call is an agent's, for the org's policy (caller: "agent").
	caller := billing.Caller{RequestID: requestIDOf(req.Extra), Agent: true}
	var info *sdkauth.TokenInfo
	if req.Extra != nil {
		info = req.Extra.TokenInfo
	}
	if info != nil {
		caller.Principal, _ = info.Extra[extraPrincipal].(string)
	}
	if info == nil || caller.Principal == "" || !time.Now().Before(info.Expiration) {
		return caller, billing.Errorf(billing.CodeUnauthorized, "missing, invalid or expired access token")
	}
	caller.Org, _ = info.Extra[extraOrg].(string)
	caller.Client, _ = info.Extra[extraClient].(string)
	caller.AuthTime, _ = info.Extra[extraAuthTime].(time.Time)
	caller.ACR, _ = info.Extra[extraACR].(string)
	caller.Admin = slices.Contains(info.Scopes, auth.ScopeAdmin)
	if caller.Org == "" {
		return caller, billing.Errorf(billing.CodeUnauthorized, "the access token names no organisation")
	}
	if !slices.Contains(info.Scopes, scope) {
		return caller, billing.Errorf(billing.CodeInsufficientScope, "the access token lacks the %s scope", scope)
	}
	return caller, nil
}

// requestIDOf is the request id the HTTP layer chose (see withRequestID), or
// a new one for a call that came without (a handler not behind the edge).
func requestIDOf(extra *sdk.RequestExtra) string {
	if extra != nil && extra.Header != nil {
		if id := extra.Header.Get(requestIDHeader); id != "" {
			return id
		}
	}
	return newRequestID()
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

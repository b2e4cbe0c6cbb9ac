package mcp

import (
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/internal/auth"
)

// TestSessionOwner: a session's owner is the org, the principal and the
// client together; changing any one makes another owner, and no choice of
// characters makes two owners collide.
func TestSessionOwner(t *testing.T) {
	base := auth.Identity{Org: "acme", Subject: "alice", Client: "agent-a"}
	owner := sessionOwner(base)
	others := map[string]auth.Identity{
		"other org":         {Org: "evil", Subject: "alice", Client: "agent-a"},
		"other principal":   {Org: "acme", Subject: "mallory", Client: "agent-a"},
		"other client":      {Org: "acme", Subject: "alice", Client: "agent-b"},
		"no client":         {Org: "acme", Subject: "alice"},
		"org and sub moved": {Org: "acme\",\"alice", Subject: "", Client: "agent-a"},
		"sub as org":        {Org: "alice", Subject: "acme", Client: "agent-a"},
	}
	for name, id := range others {
		if sessionOwner(id) == owner {
			t.Errorf("%s: same owner %s", name, owner)
		}
	}
	refreshed := base
	refreshed.Expiry = time.Now().Add(time.Hour)
	refreshed.Scopes = []string{auth.ScopeRead}
	if sessionOwner(refreshed) != owner {
		t.Error("a refreshed token of the same org, principal and client is another owner")
	}
}

// TestCallerFromTokenInfo: the tools' caller comes from the token info the
// transport attached, the principal included, not from the session owner.
func TestCallerFromTokenInfo(t *testing.T) {
	id := auth.Identity{Org: "acme", Subject: "alice", Client: "agent-a", Expiry: time.Now().Add(time.Minute),
		Scopes: []string{auth.ScopeRead, auth.ScopeWrite}}
	req := &sdk.CallToolRequest{Extra: &sdk.RequestExtra{TokenInfo: tokenInfo(id)}}
	caller, err := callerOf(req, auth.ScopeWrite)
	if err != nil || caller.Principal != "alice" || caller.Org != "acme" || caller.Client != "agent-a" || !caller.Agent {
		t.Fatalf("caller %+v, %v", caller, err)
	}
	id.Subject = ""
	req.Extra.TokenInfo = tokenInfo(id)
	if _, err := callerOf(req, auth.ScopeWrite); err == nil {
		t.Fatal("a token without a principal was accepted")
	}
}

// TestDeclared: without a session (or before initialize) a client has
// declared nothing.
func TestDeclared(t *testing.T) {
	for name, req := range map[string]*sdk.CallToolRequest{"nil": nil, "no session": {}} {
		if d := declared(req); d.protocol != "" || d.caps != nil || d.usesInputRequests() {
			t.Errorf("%s: %+v", name, d)
		}
	}
}

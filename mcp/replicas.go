package mcp

import "crypto/rand"

// Sessions of protocol 2025-11-25 live in the memory of the process that
// answered initialize: a request of that session must reach that process.
// Hashing Mcp-Session-Id at a proxy cannot do this on its own, because
// initialize carries no session id yet, so the process that creates a
// session is not the one a hash of its id picks. Instead each replica names
// itself at the front of the ids it issues ("<MCP_REPLICA_ID>.<random>") and
// the proxy maps that name to the replica (deploy/nginx/billingd.conf). A
// request whose replica is gone is answered 404 by the proxy, which tells the
// client to start a new session, on any replica. Nothing is lost: a
// confirmation lives in PostgreSQL and never depends on a session, and
// 2026-07-28 requests carry no session at all.

// sessionSeparator ends the replica id in a session id.
const sessionSeparator = "."

// sessionIDs returns the session id generator for replica: the SDK's default
// (nil) without one.
func sessionIDs(replica string) func() string {
	if replica == "" {
		return nil
	}
	return func() string { return replica + sessionSeparator + rand.Text() }
}

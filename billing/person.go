package billing

import "slices"

// Who is a person (contract §4). billingd never takes a client's word that
// a person pressed a button: a bearer token says which client holds it, not
// whether a person or a program is behind it, and any program can claim to
// be a dashboard. So a call is a person's only where billingd itself can
// tell:
//
//   - it came from billingd's own signed-in pages (Caller.Session: the
//     session cookie with its CSRF checks, which no program holding a
//     token can present), or
//   - its client is one the operator named in PERSON_CLIENTS (their own
//     first-party dashboard, say), which is the operator's word, not the
//     client's.
//
// Every other call is an agent's: any MCP call, any REST client not so
// listed, a token with no client at all. An org's agent_clients may name
// more agents, even a listed client or the pages; it never turns an agent
// into a person. This one rule decides policies (caller: agent / user),
// consent (agent_relayed unless a person's own call), who may approve, and
// the Agent mark a confirmation keeps on every channel.

// people is the operator's part of the rule: the person-facing clients.
type people struct {
	clients []string // PERSON_CLIENTS
}

// isAgent reports whether the call counts as an agent's under the org's
// policy p: everything that is not a person's (see above).
func (pp people) isAgent(p Policy, c Caller) bool {
	switch {
	case c.Agent: // over MCP, whatever its client says
		return true
	case c.Client != "" && slices.Contains(p.AgentClients, c.Client):
		return true
	case c.Session:
		return false
	default: // a bearer token: a person's only when its client is listed
		return c.Client == "" || !slices.Contains(pp.clients, c.Client)
	}
}

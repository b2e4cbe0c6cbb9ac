package billing

import (
	"context"
	"slices"
)

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
// listed, a token with no client at all, a token that names an actor (act:
// someone acting on the person's behalf, even through a listed client).
// A token whose azp and client_id disagree names no one client and is
// refused before it gets here (internal/auth). An org's agent_clients may name
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
	case c.Agent: // over MCP, or acting on someone's behalf (act), whatever its client says
		return true
	case c.Client != "" && slices.Contains(p.AgentClients, c.Client):
		return true
	case c.Session:
		return false
	default: // a bearer token: a person's only when its client is listed
		return c.Client == "" || !slices.Contains(pp.clients, c.Client)
	}
}

// Only a person loosens the gate (contract §4). Whatever its scopes
// (billing:admin included), an agent may take power away (cancel a
// confirmation, revoke a mandate) but never give it: each act below would
// let a later change reach the provider with less of a person's consent
// than the policy in force asks for, or keep people from learning that a
// change waits for them. Each is refused to an agent here, by the one rule
// above, for every transport.

// Act names a call that gives power; its value is the audit event's
// operation when the call is refused to an agent.
type Act string

const (
	ActSetPolicy      Act = "set_policy"      // PUT /api/billing/policy
	ActGrantMandate   Act = "grant_mandate"   // POST /api/billing/mandates (and its preview)
	ActDecideApproval Act = "decide_approval" // approve or reject a change that waits for approvers
	ActManageWebhooks Act = "manage_webhooks" // create, change, rotate or delete a webhook endpoint
)

// personMust says, per act, what a person must do and where.
var personMust = map[Act]string{
	ActSetPolicy:      "change the organisation's policy (on billingd's pages, or through a client the operator lists in PERSON_CLIENTS)",
	ActGrantMandate:   "grant a mandate, never an agent (on billingd's mandates page)",
	ActDecideApproval: "decide an approval: approvals come from people (sign in on the approval page)",
	ActManageWebhooks: "create, change, rotate or delete webhook endpoints (on billingd's pages, or through a client the operator lists in PERSON_CLIENTS)",
}

// ReasonPersonRequired is the reason of an agent's refused act. A refused
// act changes nothing, so it spends no one's proposal budget (the store's
// activity counts, AccountForCall and ReadActivity, leave these events out).
const ReasonPersonRequired = "person_required"

// RequirePerson refuses act to an agent (person.go's rule, under the
// caller's org's policy in force): operation_denied, audited as
// OPERATION_DENIED with the act as its operation. A person's call passes.
func (s *Service) RequirePerson(ctx context.Context, caller Caller, act Act) error {
	acct, _, err := s.account(ctx, caller.Org)
	if err != nil {
		return err
	}
	return s.refuseAgent(ctx, caller, acct.Policy, act)
}

// refuseAgent is RequirePerson for a caller whose org's policy p was read.
func (s *Service) refuseAgent(ctx context.Context, caller Caller, p Policy, act Act) error {
	if !s.people.isAgent(p, caller) {
		return nil
	}
	refused := s.event(caller, "", EventOperationDenied, "", ReasonPersonRequired)
	refused.Operation = string(act)
	if err := s.store.AppendAudit(ctx, refused); err != nil {
		return storeError("audit refusal", err)
	}
	return Errorf(CodeOperationDenied, "a person must %s; an agent cannot, whatever its scopes", personMust[act])
}

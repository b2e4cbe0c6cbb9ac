package billing

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Action is how strong the human confirmation of a change must be.
type Action string

// The confirmation levels, weakest first.
const (
	// ActionAllow executes on the first call; only for changes with nothing
	// due now (otherwise it is treated as confirm).
	ActionAllow Action = "allow"
	// ActionConfirm is the two-call handshake: the default.
	ActionConfirm Action = "confirm"
	// ActionVerify needs, besides the second call, proof from the identity
	// provider that the person who asked authenticated after the
	// confirmation was issued: a step-up access token (RFC 9470) or a fresh
	// sign-in on the verification page. The agent holding the token cannot
	// produce either (see verify.go).
	ActionVerify Action = "verify"
	// ActionApprove needs, besides the second call, an approval by another
	// person with billing:admin in the org, out of band: the agent holding
	// the token cannot produce it.
	ActionApprove Action = "approve"
	// ActionDeny refuses the change (operation_denied).
	ActionDeny Action = "deny"
)

// strength orders the actions: the most restrictive matching rule wins.
var strength = map[Action]int{ActionAllow: 0, ActionConfirm: 1, ActionVerify: 2, ActionApprove: 3, ActionDeny: 4}

// Policy is an org's rules for plan changes (the Gatekeeper model).
type Policy struct {
	Rules []PolicyRule `json:"rules"`
	// DailyLimit is the most plan changes executed per org in 24 hours;
	// 0: no limit.
	DailyLimit int `json:"daily_limit"`
	// ApprovalWindowSeconds lets a change that needs approval or
	// verification (a person has to act on a page) stay redeemable longer
	// than CONFIRM_TTL, up to 15 minutes; 0: CONFIRM_TTL.
	ApprovalWindowSeconds int `json:"approval_window_seconds"`
	// AgentClients are more client ids (azp/client_id) that count as
	// agents, besides every caller that is not a person (person.go): they
	// can make a client an agent, never a person.
	AgentClients []string `json:"agent_clients"`
}

// PolicyRule yields Action for the changes it matches. Empty conditions
// match everything.
type PolicyRule struct {
	Name      string    `json:"name"`
	Operation Operation `json:"operation,omitempty"` // "" matches both
	// AmountDueAboveCents matches when more than this is charged now.
	AmountDueAboveCents *int64   `json:"amount_due_above_cents,omitempty"`
	ToPlans             []string `json:"to_plans,omitempty"`
	// Danger matches changes of these kinds (contract §15); empty: any.
	Danger []Danger `json:"danger,omitempty"`
	// Caller is "agent", "user" or "" for anyone.
	Caller string `json:"caller,omitempty"`
	Action Action `json:"action"`
	// ApprovalsRequired, on an approve rule, is how many distinct people
	// (none the requester) must approve: 1 to MaxApprovers, 1 when absent.
	ApprovalsRequired *int `json:"approvals_required,omitempty"`
}

// Limits of a policy.
const (
	MaxPolicyRules     = 50
	MaxApprovalWindow  = 15 * 60 // seconds, the token spec's maximum TTL
	MaxApprovers       = 5       // the most approvals_required a rule may ask for
	maxPolicyNameRunes = 64
)

var ruleNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$`)

// validate checks the policy against the catalog. The error names the bad
// field by its place (rules[2].to_plans), never by what the client wrote in
// it: messages are shown back and must not echo input.
func (p Policy) validate(c Catalog) error {
	switch {
	case len(p.Rules) > MaxPolicyRules:
		return fmt.Errorf("at most %d rules", MaxPolicyRules)
	case p.DailyLimit < 0:
		return fmt.Errorf("daily_limit must be 0 (none) or more")
	case p.ApprovalWindowSeconds < 0 || p.ApprovalWindowSeconds > MaxApprovalWindow:
		return fmt.Errorf("approval_window_seconds must be 0 to %d", MaxApprovalWindow)
	}
	names := map[string]bool{}
	for i, r := range p.Rules {
		if !ruleNamePattern.MatchString(r.Name) {
			return fmt.Errorf("rules[%d].name must be 1–%d letters, digits, spaces or _.-", i, maxPolicyNameRunes)
		}
		if names[r.Name] {
			return fmt.Errorf("rules[%d].name is used by an earlier rule", i)
		}
		names[r.Name] = true
		if err := r.validate(c); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	return nil
}

func (r PolicyRule) validate(c Catalog) error {
	if _, ok := strength[r.Action]; !ok {
		return fmt.Errorf("action must be allow, confirm, verify, approve or deny")
	}
	if _, ok := operationOf(r.Operation); r.Operation != "" && !ok {
		return fmt.Errorf("operation must be %s or empty for all", operationList())
	}
	if r.AmountDueAboveCents != nil && *r.AmountDueAboveCents < 0 {
		return fmt.Errorf("amount_due_above_cents must not be negative")
	}
	if r.Caller != "" && r.Caller != "agent" && r.Caller != "user" {
		return fmt.Errorf(`caller must be "agent", "user" or empty`)
	}
	if n := r.ApprovalsRequired; n != nil {
		if r.Action != ActionApprove {
			return fmt.Errorf("approvals_required is only for action approve")
		}
		if *n < 1 || *n > MaxApprovers {
			return fmt.Errorf("approvals_required must be 1 to %d", MaxApprovers)
		}
	}
	for i, d := range r.Danger {
		if !slices.Contains(dangers, d) {
			return fmt.Errorf("danger[%d] must be reversible, charges or irreversible", i)
		}
	}
	for i, id := range r.ToPlans {
		if _, ok := c.Plan(id); !ok {
			return fmt.Errorf("to_plans[%d] is not a plan of the catalog", i)
		}
	}
	return nil
}

// changeFacts are what a policy decides on.
type changeFacts struct {
	op             Operation
	to             string
	amountDueCents int64
	// danger is "" before the quote (refuseEarly), where a rule naming
	// dangers matches nothing yet.
	danger Danger
	agent  bool
}

// decide returns the most restrictive action of the matching rules (confirm
// when none matches) and the rule that set it. allow is granted only for a
// change with nothing due now that can be undone.
func (p Policy) decide(ch changeFacts) (Action, string) {
	action, rule := ActionConfirm, ""
	matched := false
	for _, r := range p.Rules {
		if !r.matches(ch) {
			continue
		}
		if !matched || strength[r.Action] > strength[action] {
			action, rule, matched = r.Action, r.Name, true
		}
	}
	if action == ActionAllow && (ch.amountDueCents > 0 || ch.danger == DangerIrreversible) {
		// allow lets a change run without asking anyone only when nothing
		// is due now and it can be undone: what cannot be (cancelling now)
		// is always a person's.
		return ActionConfirm, rule
	}
	return action, rule
}

// planNamed is the plan a change of o moves to, as a rule's to_plans
// names it: "" for an operation that names no plan (seats, cancelling,
// resuming keep the plan), so that "upgrades to Pro may run at once" never
// lets an agent cancel a Pro subscription, nor does "no Scale for agents"
// stop one from reducing its seats.
func planNamed(o *operation, to string) string {
	reqTo, _ := o.fields(to, 0)
	return reqTo
}

// approvalsRequired is how many people must approve the change when the
// policy's action for it is approve: the most that any matching approve
// rule asks for (the strictest), 1 when none says.
func (p Policy) approvalsRequired(ch changeFacts) int {
	n := 1
	for _, r := range p.Rules {
		if r.Action == ActionApprove && r.ApprovalsRequired != nil && r.matches(ch) {
			n = max(n, *r.ApprovalsRequired)
		}
	}
	return n
}

func (r PolicyRule) matches(ch changeFacts) bool {
	switch {
	case r.Operation != "" && r.Operation != ch.op:
		return false
	case r.AmountDueAboveCents != nil && ch.amountDueCents <= *r.AmountDueAboveCents:
		return false
	case len(r.ToPlans) > 0 && !slices.Contains(r.ToPlans, ch.to):
		return false
	case len(r.Danger) > 0 && !slices.Contains(r.Danger, ch.danger):
		return false
	case r.Caller == "agent" && !ch.agent, r.Caller == "user" && ch.agent:
		return false
	}
	return true
}

// Applying an org's policy to a change: before the quote (refuseEarly),
// after it (gate) and, in confirm.go, again at execution
// (policyAtExecution); and reading and replacing the policy.

// dailyWindow is the period of a policy's daily limit.
const dailyWindow = 24 * time.Hour

// ruling is the policy's action for a change and, for a denial, the reason
// the audit log and the client are given.
func ruling(p Policy, facts changeFacts) (Action, string) {
	action, rule := p.decide(facts)
	if action == ActionDeny {
		return ActionDeny, "policy rule " + rule
	}
	return action, ""
}

// overDailyLimit reports whether the org already made the policy's daily
// number of changes. The count is read through counter: the store for a
// first call, the transaction for a second call that holds locks.
func overDailyLimit(ctx context.Context, counter changeCounter, p Policy, org string) (bool, error) {
	if p.DailyLimit <= 0 {
		return false, nil
	}
	n, err := counter.ExecutedSince(ctx, org, dailyWindow)
	if err != nil {
		return false, fmt.Errorf("count executed changes: %w", err)
	}
	return n >= p.DailyLimit, nil
}

// refuseEarly applies what of the policy needs no price, before the provider
// is asked for one: a rule that denies the change whatever it costs, and the
// daily limit. A refused first call costs no provider request, so a denied
// principal cannot spend the account's API rate limit; it counts against the
// caller's issuance rate limit like an issued token.
//
// The price can only make a change more restricted (a rule on the amount
// matches more as the amount grows, and allow turns into confirm), so a
// change denied at an amount of zero is denied at any amount.
func (s *Service) refuseEarly(ctx context.Context, caller Caller, p Policy, op *operation, to string) error {
	action, reason := ruling(p, changeFacts{op: op.name, to: planNamed(op, to), agent: s.people.isAgent(p, caller)})
	if action != ActionDeny {
		over, err := overDailyLimit(ctx, s.store, p, caller.Org)
		if err != nil {
			return storeError("check daily limit", err)
		}
		if !over {
			return nil
		}
		reason = reasonDailyLimit
	}
	return s.denyFirstCall(ctx, caller, op.name, reason)
}

// gate applies the org's policy to a quoted change: it returns the action
// the policy asks for, or operation_denied when a rule on the amount denies
// it (refuseEarly took the other denials before the quote).
func (s *Service) gate(ctx context.Context, caller Caller, p Policy, op *operation, t Terms) (Action, error) {
	action, reason := ruling(p, changeFacts{op: op.name, to: planNamed(op, t.ToPlan), amountDueCents: t.AmountDueCents,
		danger: t.danger(), agent: s.people.isAgent(p, caller)})
	if action == ActionDeny {
		return "", s.denyFirstCall(ctx, caller, op.name, reason)
	}
	return action, nil
}

// denyFirstCall audits a first call refused by policy and returns
// operation_denied. It holds no lock, so the event is written on its own.
func (s *Service) denyFirstCall(ctx context.Context, caller Caller, op Operation, reason string) error {
	if err := s.store.AppendAudit(ctx, s.event(caller, op, EventOperationDenied, "", reason)); err != nil {
		return storeError("audit denial", err)
	}
	return errDenied(reason)
}

func errDenied(reason string) *Error {
	return Errorf(CodeOperationDenied, "the organisation's policy does not allow this change (%s)", reason)
}

// Policy returns the caller's org's policy (the empty policy, "confirm
// everything", when none was set).
func (s *Service) Policy(ctx context.Context, caller Caller) (Policy, error) {
	acct, _, err := s.account(ctx, caller.Org)
	if err != nil {
		return Policy{}, err
	}
	if acct.Policy.Rules == nil {
		acct.Policy.Rules = []PolicyRule{}
	}
	return acct.Policy, nil
}

// SetPolicy validates and stores the org's policy, audited as
// POLICY_UPDATED in the same transaction. Only a person changes it
// (person.go), as the policy in force judges the caller: an agent that
// could would remove the consent it is asked for.
func (s *Service) SetPolicy(ctx context.Context, caller Caller, p Policy) (Policy, error) {
	if !caller.Admin {
		return Policy{}, Errorf(CodeInsufficientScope, "changing the policy needs billing:admin")
	}
	if err := s.RequirePerson(ctx, caller, ActSetPolicy); err != nil {
		return Policy{}, err
	}
	if err := p.validate(s.catalog); err != nil {
		return Policy{}, Errorf(CodeInvalidRequest, "invalid policy: %v", err)
	}
	if p.Rules == nil {
		p.Rules = []PolicyRule{}
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		if err := tx.SavePolicy(ctx, caller.Org, p, caller.Principal); err != nil {
			return err
		}
		return tx.Record(ctx, Record{Events: []AuditEvent{s.event(caller, "", EventPolicyUpdated, "", "")}})
	})
	if err != nil {
		return Policy{}, storeError("save policy", err)
	}
	return p, nil
}

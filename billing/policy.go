package billing

import (
	"fmt"
	"regexp"
	"slices"
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
	// ActionApprove needs, besides the second call, an approval by another
	// person with billing:admin in the org, out of band: the agent holding
	// the token cannot produce it.
	ActionApprove Action = "approve"
	// ActionDeny refuses the change (operation_denied).
	ActionDeny Action = "deny"
)

// strength orders the actions: the most restrictive matching rule wins.
var strength = map[Action]int{ActionAllow: 0, ActionConfirm: 1, ActionApprove: 2, ActionDeny: 3}

// Policy is an org's rules for plan changes (the Gatekeeper model).
type Policy struct {
	Rules []PolicyRule `json:"rules"`
	// DailyLimit is the most plan changes executed per org in 24 hours;
	// 0: no limit.
	DailyLimit int `json:"daily_limit"`
	// ApprovalWindowSeconds lets a change that needs approval stay
	// redeemable longer than CONFIRM_TTL, up to 15 minutes; 0: CONFIRM_TTL.
	ApprovalWindowSeconds int `json:"approval_window_seconds"`
	// AgentClients are client ids (azp/client_id) that count as agents on
	// REST too; calls over MCP always count as an agent's.
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
	// Caller is "agent", "user" or "" for anyone.
	Caller string `json:"caller,omitempty"`
	Action Action `json:"action"`
}

// Limits of a policy.
const (
	MaxPolicyRules     = 50
	MaxApprovalWindow  = 15 * 60 // seconds, the token spec's maximum TTL
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
		return fmt.Errorf("action must be allow, confirm, approve or deny")
	}
	if r.Operation != "" && r.Operation != OpUpgrade && r.Operation != OpDowngrade {
		return fmt.Errorf("operation must be upgrade_plan, downgrade_plan or empty for both")
	}
	if r.AmountDueAboveCents != nil && *r.AmountDueAboveCents < 0 {
		return fmt.Errorf("amount_due_above_cents must not be negative")
	}
	if r.Caller != "" && r.Caller != "agent" && r.Caller != "user" {
		return fmt.Errorf(`caller must be "agent", "user" or empty`)
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
	agent          bool
}

// decide returns the most restrictive action of the matching rules (confirm
// when none matches) and the rule that set it. allow is granted only for a
// change with nothing due now.
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
	if action == ActionAllow && ch.amountDueCents > 0 {
		return ActionConfirm, rule
	}
	return action, rule
}

func (r PolicyRule) matches(ch changeFacts) bool {
	switch {
	case r.Operation != "" && r.Operation != ch.op:
		return false
	case r.AmountDueAboveCents != nil && ch.amountDueCents <= *r.AmountDueAboveCents:
		return false
	case len(r.ToPlans) > 0 && !slices.Contains(r.ToPlans, ch.to):
		return false
	case r.Caller == "agent" && !ch.agent, r.Caller == "user" && ch.agent:
		return false
	}
	return true
}

// isAgent reports whether the caller acts as an agent under p.
func (p Policy) isAgent(c Caller) bool {
	return c.Agent || c.Client != "" && slices.Contains(p.AgentClients, c.Client)
}

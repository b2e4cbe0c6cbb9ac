package billing

import "testing"

func TestPolicyDecide(t *testing.T) {
	hundred := int64(100)
	p := Policy{AgentClients: []string{"bot"}, Rules: []PolicyRule{
		{Name: "cheap changes", AmountDueAboveCents: nil, Operation: OpDowngrade, Action: ActionAllow},
		{Name: "big spend", AmountDueAboveCents: &hundred, Action: ActionApprove},
		{Name: "no scale for agents", ToPlans: []string{"scale"}, Caller: "agent", Action: ActionDeny},
		{Name: "humans may upgrade to pro", ToPlans: []string{"pro"}, Caller: "user", Action: ActionAllow},
	}}
	cases := []struct {
		name   string
		facts  changeFacts
		action Action
		rule   string
	}{
		{"no rule matches: confirm", changeFacts{op: OpUpgrade, to: "free", amountDueCents: 50}, ActionConfirm, ""},
		{"allow with nothing due", changeFacts{op: OpDowngrade, to: "free"}, ActionAllow, "cheap changes"},
		{"amount at the threshold does not match", changeFacts{op: OpUpgrade, to: "team", amountDueCents: 100}, ActionConfirm, ""},
		{"amount above the threshold", changeFacts{op: OpUpgrade, to: "team", amountDueCents: 101}, ActionApprove, "big spend"},
		{"most restrictive wins", changeFacts{op: OpUpgrade, to: "scale", amountDueCents: 500, agent: true}, ActionDeny, "no scale for agents"},
		{"caller user does not match agents", changeFacts{op: OpUpgrade, to: "scale", amountDueCents: 50}, ActionConfirm, ""},
		{"allow with money due becomes confirm", changeFacts{op: OpUpgrade, to: "pro", amountDueCents: 50}, ActionConfirm, "humans may upgrade to pro"},
		{"allow for agents does not match a user rule", changeFacts{op: OpUpgrade, to: "pro", agent: true}, ActionConfirm, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			action, rule := p.decide(c.facts)
			if action != c.action || rule != c.rule {
				t.Fatalf("decide = %s (%q), want %s (%q)", action, rule, c.action, c.rule)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	cat, err := NewCatalog(DefaultPlans())
	if err != nil {
		t.Fatal(err)
	}
	neg := int64(-1)
	for name, p := range map[string]Policy{
		"unnamed rule":      {Rules: []PolicyRule{{Action: ActionDeny}}},
		"bad action":        {Rules: []PolicyRule{{Name: "a", Action: "maybe"}}},
		"unknown plan":      {Rules: []PolicyRule{{Name: "a", ToPlans: []string{"gold"}, Action: ActionDeny}}},
		"negative amount":   {Rules: []PolicyRule{{Name: "a", AmountDueAboveCents: &neg, Action: ActionDeny}}},
		"window too long":   {ApprovalWindowSeconds: MaxApprovalWindow + 1},
		"negative limit":    {DailyLimit: -1},
		"duplicate names":   {Rules: []PolicyRule{{Name: "a", Action: ActionDeny}, {Name: "a", Action: ActionAllow}}},
		"unknown caller":    {Rules: []PolicyRule{{Name: "a", Caller: "robot", Action: ActionDeny}}},
		"unknown operation": {Rules: []PolicyRule{{Name: "a", Operation: "delete", Action: ActionDeny}}},
		"unknown danger":    {Rules: []PolicyRule{{Name: "a", Danger: []Danger{DangerCharges, "scary"}, Action: ActionDeny}}},
	} {
		if err := p.validate(cat); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := Policy{DailyLimit: 3, ApprovalWindowSeconds: 900, Rules: []PolicyRule{{Name: "big spend", Action: ActionApprove},
		{Name: "lasting", Danger: dangers, Action: ActionVerify}}}
	if err := ok.validate(cat); err != nil {
		t.Errorf("valid policy refused: %v", err)
	}
}

// TestPolicyOrderWithVerify: allow < confirm < verify < approve < deny;
// of the matching rules the most restrictive wins, whatever their order.
func TestPolicyOrderWithVerify(t *testing.T) {
	order := []Action{ActionAllow, ActionConfirm, ActionVerify, ActionApprove, ActionDeny}
	for i := range order {
		for j := range order {
			p := Policy{Rules: []PolicyRule{{Name: "a", Action: order[i]}, {Name: "b", Action: order[j]}}}
			want := order[max(i, j)]
			if got, _ := p.decide(changeFacts{op: OpDowngrade, to: "free"}); got != want {
				t.Errorf("rules %s then %s: decide = %s, want %s", order[i], order[j], got, want)
			}
		}
	}
	if err := (PolicyRule{Name: "v", Action: ActionVerify}).validate(Catalog{}); err != nil {
		t.Fatalf("verify is not a valid action: %v", err)
	}
}

// TestPolicyDanger: a rule naming dangers matches a change of those kinds
// only, and before the quote (no danger known yet) matches nothing.
func TestPolicyDanger(t *testing.T) {
	p := Policy{Rules: []PolicyRule{
		{Name: "money moves now", Danger: []Danger{DangerCharges}, Action: ActionApprove},
		{Name: "never what lasts", Danger: []Danger{DangerIrreversible}, Action: ActionDeny},
	}}
	for _, c := range []struct {
		danger Danger
		action Action
	}{
		{DangerCharges, ActionApprove},
		{DangerIrreversible, ActionDeny},
		{DangerReversible, ActionConfirm},
		{"", ActionConfirm}, // refuseEarly, before the quote
	} {
		if action, _ := p.decide(changeFacts{op: OpUpgrade, to: "pro", danger: c.danger}); action != c.action {
			t.Errorf("danger %q: %s, want %s", c.danger, action, c.action)
		}
	}
}

// TestOperationDanger: what each kind of plan change is (contract §15).
func TestOperationDanger(t *testing.T) {
	keep := &ScheduledChange{ToPlan: "free"}
	for _, c := range []struct {
		name string
		op   Operation
		t    Terms
		want Danger
	}{
		{"upgrade", OpUpgrade, Terms{FromPlan: "pro", ToPlan: "scale"}, DangerCharges},
		{"downgrade now", OpDowngrade, Terms{FromPlan: "scale", ToPlan: "pro"}, DangerCharges},
		{"downgrade at period end", OpDowngrade, Terms{FromPlan: "scale", ToPlan: "pro", AtPeriodEnd: true}, DangerReversible},
		{"keep the plan", OpUpgrade, Terms{FromPlan: "pro", ToPlan: "pro", Cancels: keep}, DangerReversible},
		{"more seats", OpSeats, Terms{FromPlan: "pro", ToPlan: "pro", Quantity: 2, ToQuantity: 5}, DangerCharges},
		{"fewer seats now", OpSeats, Terms{FromPlan: "pro", ToPlan: "pro", Quantity: 5, ToQuantity: 2}, DangerCharges},
		{"more seats over a schedule", OpSeats, Terms{FromPlan: "pro", ToPlan: "pro", Quantity: 2, ToQuantity: 3, Cancels: keep}, DangerCharges},
	} {
		if got := c.t.danger(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestAllowNeverIrreversible: allow runs a change at once only when it
// can be undone and nothing is due now; cancelling now always asks.
func TestAllowNeverIrreversible(t *testing.T) {
	p := Policy{Rules: []PolicyRule{{Name: "agents go free", Action: ActionAllow}}}
	for _, c := range []struct {
		danger Danger
		due    int64
		want   Action
	}{
		{DangerReversible, 0, ActionAllow},
		{DangerCharges, 0, ActionAllow},
		{DangerCharges, 100, ActionConfirm},
		{DangerIrreversible, 0, ActionConfirm},
	} {
		if got, _ := p.decide(changeFacts{op: OpCancel, danger: c.danger, amountDueCents: c.due}); got != c.want {
			t.Errorf("%s, %d due: %s, want %s", c.danger, c.due, got, c.want)
		}
	}
}

// TestToPlansNamesPlanMoves: a rule's to_plans matches the plan a change
// moves to, never the plan seats, cancelling or resuming keep.
func TestToPlansNamesPlanMoves(t *testing.T) {
	for _, c := range []struct {
		op   Operation
		want string
	}{{OpUpgrade, "pro"}, {OpDowngrade, "pro"}, {OpSeats, ""}, {OpCancel, ""}, {OpResume, ""}} {
		o, _ := operationOf(c.op)
		if got := planNamed(o, "pro"); got != c.want {
			t.Errorf("%s: %q, want %q", c.op, got, c.want)
		}
	}
}

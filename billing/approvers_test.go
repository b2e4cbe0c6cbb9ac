package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// Several approvers and fail-closed expiry (contract §10, approval.go).

var (
	requester = billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot", RequestID: "req-vera"}
	boss      = billing.Caller{Org: "org_vb", Principal: "boss", Admin: true, Client: "console", RequestID: "req-boss"}
	carol     = billing.Caller{Org: "org_vb", Principal: "carol", Admin: true, Session: true, Client: "billingd-pages"}
	dave      = billing.Caller{Org: "org_vb", Principal: "dave", Admin: true, Client: "console"}
)

func approvals(n int) *int { return &n }

// newApproversFixture is the handshake under rules, with an approval
// window of window seconds (the token lives a minute otherwise).
func newApproversFixture(t *testing.T, window int, rules ...billing.PolicyRule) handshakeFixture {
	t.Helper()
	acct := testAccount()
	acct.Policy = billing.Policy{AgentClients: []string{"bot"}, ApprovalWindowSeconds: window, Rules: rules}
	store := billingtest.NewStore(dbNow, acct)
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"},
		PeriodEnd: periodEnd, ReadState: billingtest.StateOf(testAccount()), Clock: func() time.Time { return dbNow }}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, PublicBaseURL: "https://billing.example", PersonClients: []string{"console"}})
	if err != nil {
		t.Fatal(err)
	}
	return handshakeFixture{svc: svc, store: store, provider: provider}
}

// approvalEvents are the approval events of confirmation id, oldest first.
func (f handshakeFixture) approvalEvents(id string) []billing.AuditEvent {
	var out []billing.AuditEvent
	for _, e := range f.store.Snapshot().Audit {
		if e.ConfirmationID == id && strings.HasPrefix(e.Event, "APPROVAL_") {
			out = append(out, e)
		}
	}
	return out
}

func progress(v billing.ConfirmationView) string {
	given, required, ok := v.Counts()
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%d of %d", given, required)
}

// TestTwoApprovers: a rule asking for two approvers holds the change until
// two distinct people, neither the requester nor an agent, approved; the
// same person approving twice counts once; each approval is audited with
// the count; the first call's details say how many are needed.
func TestTwoApprovers(t *testing.T) {
	ctx := context.Background()
	f := newApproversFixture(t, 0, billing.PolicyRule{Name: "two", Action: billing.ActionApprove, ApprovalsRequired: approvals(2)})
	p := f.propose(t, requester, billing.OpUpgrade, "scale")
	body, _ := json.Marshal(p)
	if !p.ApprovalRequired || !strings.Contains(string(body), `"approvals_given":0,"approvals_required":2`) {
		t.Fatalf("first call does not show the approvals needed: %s", body)
	}
	for name, who := range map[string]billing.Caller{
		"the requester": {Org: "org_vb", Principal: "vera", Admin: true, Client: "console"},
		"an agent":      {Org: "org_vb", Principal: "boss", Admin: true, Client: "bot"},
		"over MCP":      {Org: "org_vb", Principal: "boss", Admin: true, Client: "console", Agent: true},
	} {
		if _, err := f.svc.Approve(ctx, who, p.ConfirmationID); err == nil {
			t.Fatalf("%s approved", name)
		}
	}
	v, err := f.svc.Approve(ctx, boss, p.ConfirmationID)
	if err != nil || v.Approval != billing.ApprovalPending || progress(v) != "1 of 2" {
		t.Fatalf("first approval: %s, %s, %v", v.Approval, progress(v), err)
	}
	_, err = f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalPending)
	if v, err = f.svc.Approve(ctx, boss, p.ConfirmationID); err != nil || progress(v) != "1 of 2" {
		t.Fatalf("the same person again: %s, %v; want still 1 of 2", progress(v), err)
	}
	_, err = f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalPending)
	if len(f.provider.ApplyCalls()) != 0 {
		t.Fatal("the change was sent with one approval of two")
	}
	if v, err = f.svc.Approve(ctx, carol, p.ConfirmationID); err != nil || v.Approval != billing.ApprovalGranted || progress(v) != "2 of 2" {
		t.Fatalf("second approval: %s, %s, %v", v.Approval, progress(v), err)
	}
	events := f.approvalEvents(p.ConfirmationID)
	if len(events) != 2 {
		t.Fatalf("approval events %+v: want one per approval given", events)
	}
	for i, who := range []string{"boss", "carol"} {
		given, required, ok := billing.ApprovalCounts(events[i])
		if events[i].Event != billing.EventApprovalGranted || events[i].Principal != who || !ok || given != i+1 || required != 2 {
			t.Fatalf("event %d: %+v (counts %d of %d)", i, events[i], given, required)
		}
	}
	res, err := f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	if err != nil || !res.OK {
		t.Fatalf("second call after two approvals: %+v, %v", res, err)
	}
	if k := f.confirmation(t, p.ConfirmationID).Consent; k == nil || k.Method != billing.ConsentApproved || k.ApprovedBy != "boss, carol" {
		t.Fatalf("consent %+v: want approved by boss, carol", k)
	}
	if _, err := f.svc.Approve(ctx, dave, p.ConfirmationID); err == nil {
		t.Fatal("an approval after the change executed was accepted")
	}
}

// TestOneRejectionRejects: whatever was approved before, one rejection
// rejects the change; later approvals are refused and the second call
// answers approval_rejected.
func TestOneRejectionRejects(t *testing.T) {
	ctx := context.Background()
	f := newApproversFixture(t, 0, billing.PolicyRule{Name: "three", Action: billing.ActionApprove, ApprovalsRequired: approvals(3)})
	p := f.propose(t, requester, billing.OpUpgrade, "scale")
	if _, err := f.svc.Approve(ctx, boss, p.ConfirmationID); err != nil {
		t.Fatal(err)
	}
	if v, err := f.svc.Reject(ctx, carol, p.ConfirmationID); err != nil || v.Status != billing.StatusRejected {
		t.Fatalf("reject: %+v, %v", v, err)
	}
	_, err := f.svc.Approve(ctx, dave, p.ConfirmationID)
	wantCode(t, err, billing.CodeTokenInvalid)
	_, err = f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalRejected)
	if !strings.Contains(billing.PublicMessage(err), "(rejected)") {
		t.Fatalf("message %q does not say it was rejected", billing.PublicMessage(err))
	}
	events := f.approvalEvents(p.ConfirmationID)
	last := events[len(events)-1]
	if len(events) != 2 || last.Event != billing.EventApprovalRejected || last.Reason != "rejected" || last.Outcome != "rejected" || last.Principal != "carol" {
		t.Fatalf("approval events %+v", events)
	}
	if len(f.provider.ApplyCalls()) != 0 {
		t.Fatal("a rejected change was sent")
	}
}

// TestApprovalExpiryFailsClosed: approvals not complete when the window
// ends reject the change, reason expired, with one APPROVAL_EXPIRED event:
// by the expiry round (every replica's), or by whichever call meets it
// first (a second call, an approval). A change needing no approval is not
// touched.
func TestApprovalExpiryFailsClosed(t *testing.T) {
	ctx := context.Background()
	rule := billing.PolicyRule{Name: "two", ToPlans: []string{"scale"}, Action: billing.ActionApprove, ApprovalsRequired: approvals(2)}
	f := newApproversFixture(t, 300, rule)
	p := f.propose(t, requester, billing.OpUpgrade, "scale")
	plain := f.propose(t, requester, billing.OpDowngrade, "free") // confirm level: no approval
	if body, _ := json.Marshal(plain); strings.Contains(string(body), "approvals_") {
		t.Fatalf("a proposal needing no approval states approvals: %s", body)
	}
	if _, err := f.svc.Approve(ctx, boss, p.ConfirmationID); err != nil {
		t.Fatal(err)
	}
	f.store.Advance(300 * time.Second) // the window's last instant: still open
	if n, err := f.svc.ExpireApprovals(ctx, 10); err != nil || n != 0 {
		t.Fatalf("expired %d before the window ended (%v)", n, err)
	}
	f.store.Advance(time.Second)
	if n, err := f.svc.ExpireApprovals(ctx, 10); err != nil || n != 1 {
		t.Fatalf("expired %d, %v: want 1", n, err)
	}
	c := f.confirmation(t, p.ConfirmationID)
	if c.Status != billing.StatusRejected || c.Approval != billing.ApprovalRejected || c.Failure != "expired" {
		t.Fatalf("after the window: %s %s %q", c.Status, c.Approval, c.Failure)
	}
	if got := f.confirmation(t, plain.ConfirmationID).Status; got != billing.StatusPending {
		t.Fatalf("a confirmation needing no approval became %s", got)
	}
	events := f.approvalEvents(p.ConfirmationID)
	last := events[len(events)-1]
	if len(events) != 2 || last.Event != billing.EventApprovalExpired || last.Reason != "expired" || last.Outcome != "rejected" ||
		last.Principal != "vera" {
		t.Fatalf("approval events %+v: want APPROVAL_EXPIRED (expired) in the requester's name", events)
	}
	if n, _ := f.svc.ExpireApprovals(ctx, 10); n != 0 {
		t.Fatalf("expired %d again", n)
	}
	_, err := f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalRejected)
	if !strings.Contains(billing.PublicMessage(err), "(expired)") {
		t.Fatalf("message %q does not say it expired", billing.PublicMessage(err))
	}
	_, err = f.svc.Approve(ctx, carol, p.ConfirmationID)
	wantCode(t, err, billing.CodeTokenExpired) // as when the approver comes first (TestApprovalExpiryWithoutTheRound)
	if len(f.provider.ApplyCalls()) != 0 {
		t.Fatal("an expired change was sent")
	}
}

// TestApprovalExpiryWithoutTheRound: the second call, or an approver, that
// meets a lapsed approval before the expiry round rejects it just the
// same, once.
func TestApprovalExpiryWithoutTheRound(t *testing.T) {
	ctx := context.Background()
	for name, first := range map[string]func(f handshakeFixture, p billing.ChangeResult) (billing.Code, error){
		"second call": func(f handshakeFixture, p billing.ChangeResult) (billing.Code, error) {
			_, err := f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
			return billing.CodeApprovalRejected, err
		},
		"approver": func(f handshakeFixture, p billing.ChangeResult) (billing.Code, error) {
			_, err := f.svc.Approve(ctx, carol, p.ConfirmationID)
			return billing.CodeTokenExpired, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newApproversFixture(t, 0, billing.PolicyRule{Name: "one", Action: billing.ActionApprove})
			p := f.propose(t, requester, billing.OpUpgrade, "scale")
			f.store.Advance(time.Minute + time.Second)
			want, err := first(f, p)
			wantCode(t, err, want)
			if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusRejected || c.Failure != "expired" {
				t.Fatalf("%s %q: want rejected, expired", c.Status, c.Failure)
			}
			if n, _ := f.svc.ExpireApprovals(ctx, 10); n != 0 {
				t.Fatalf("the round expired %d more", n)
			}
			_, err = f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, billing.CodeApprovalRejected)
			if events := f.approvalEvents(p.ConfirmationID); len(events) != 1 || events[0].Event != billing.EventApprovalExpired {
				t.Fatalf("approval events %+v: want one APPROVAL_EXPIRED", events)
			}
		})
	}
}

// TestStrictestRuleSetsApprovers: of the matching approve rules, the one
// asking for the most approvers sets N; a rule that does not match does not.
func TestStrictestRuleSetsApprovers(t *testing.T) {
	hundred := int64(100)
	f := newApproversFixture(t, 0,
		billing.PolicyRule{Name: "any", Action: billing.ActionApprove, ApprovalsRequired: approvals(2)},
		billing.PolicyRule{Name: "big", AmountDueAboveCents: &hundred, Action: billing.ActionApprove, ApprovalsRequired: approvals(4)},
		billing.PolicyRule{Name: "team", ToPlans: []string{"team"}, Action: billing.ActionApprove, ApprovalsRequired: approvals(5)},
		billing.PolicyRule{Name: "default", Operation: billing.OpDowngrade, Action: billing.ActionApprove},
	)
	up := f.propose(t, requester, billing.OpUpgrade, "scale") // $17.42 due: any and big match
	if _, n, _ := up.Details.Counts(); n != 4 || f.confirmation(t, up.ConfirmationID).ApprovalsRequired != 4 {
		t.Fatalf("upgrade needs %d approvals, want 4", n)
	}
	down := f.propose(t, requester, billing.OpDowngrade, "free") // nothing due: any and default (1) match
	if _, n, _ := down.Details.Counts(); n != 2 {
		t.Fatalf("downgrade needs %d approvals, want 2", n)
	}
}

// TestApproversPolicyValidation: approvals_required is 1 to 5, on approve
// rules only; anything else is invalid_request.
func TestApproversPolicyValidation(t *testing.T) {
	ctx := context.Background()
	f := newApproversFixture(t, 0)
	for name, rule := range map[string]billing.PolicyRule{
		"zero":        {Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(0)},
		"six":         {Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(6)},
		"negative":    {Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(-1)},
		"not approve": {Name: "r", Action: billing.ActionConfirm, ApprovalsRequired: approvals(2)},
		"on a deny":   {Name: "r", Action: billing.ActionDeny, ApprovalsRequired: approvals(1)},
		"on a verify": {Name: "r", Action: billing.ActionVerify, ApprovalsRequired: approvals(3)},
	} {
		_, err := f.svc.SetPolicy(ctx, boss, billing.Policy{Rules: []billing.PolicyRule{rule}})
		if billing.ErrorCode(err) != billing.CodeInvalidRequest || !strings.Contains(billing.PublicMessage(err), "rules[0].approvals_required") {
			t.Errorf("%s: %v, want invalid_request naming rules[0].approvals_required", name, err)
		}
	}
	for _, n := range []int{1, 5} {
		p, err := f.svc.SetPolicy(ctx, boss, billing.Policy{Rules: []billing.PolicyRule{{Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(n)}}})
		if err != nil || *p.Rules[0].ApprovalsRequired != n {
			t.Errorf("%d approvers refused: %v", n, err)
		}
	}
	body, _ := json.Marshal(billing.PolicyRule{Name: "r", Action: billing.ActionApprove})
	if strings.Contains(string(body), "approvals_required") {
		t.Errorf("a rule without approvals_required is written with it: %s", body)
	}
}

// TestStricterApproversAtExecution: the policy is decided again at the
// second call; one that now asks for more approvers than the confirmation
// was issued with waits for them (those given still count), and one that
// asks for fewer does not lower the issued N.
func TestStricterApproversAtExecution(t *testing.T) {
	ctx := context.Background()
	f := newApproversFixture(t, 0, billing.PolicyRule{Name: "r", Action: billing.ActionApprove})
	p := f.propose(t, requester, billing.OpUpgrade, "scale")
	if v, err := f.svc.Approve(ctx, boss, p.ConfirmationID); err != nil || v.Approval != billing.ApprovalGranted {
		t.Fatalf("approve: %+v, %v", v, err)
	}
	if _, err := f.svc.SetPolicy(ctx, dave, billing.Policy{AgentClients: []string{"bot"},
		Rules: []billing.PolicyRule{{Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(2)}}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalPending)
	if c := f.confirmation(t, p.ConfirmationID); c.ApprovalsRequired != 2 || c.Approval != billing.ApprovalPending || len(c.Approvers) != 1 {
		t.Fatalf("after the stricter policy: %s, %v of %d", c.Approval, c.Approvers, c.ApprovalsRequired)
	}
	if v, err := f.svc.Approve(ctx, carol, p.ConfirmationID); err != nil || progress(v) != "2 of 2" || v.Approval != billing.ApprovalGranted {
		t.Fatalf("second approval: %s %s, %v", v.Approval, progress(v), err)
	}
	if _, err := f.confirm(requester, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
		t.Fatalf("second call with the approvals now needed: %v", err)
	}

	// Fewer at execution: the issued N stands.
	if _, err := f.svc.SetPolicy(ctx, dave, billing.Policy{AgentClients: []string{"bot"},
		Rules: []billing.PolicyRule{{Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(3)}}}); err != nil {
		t.Fatal(err)
	}
	down := f.propose(t, requester, billing.OpDowngrade, "pro")
	if _, err := f.svc.SetPolicy(ctx, dave, billing.Policy{AgentClients: []string{"bot"},
		Rules: []billing.PolicyRule{{Name: "r", Action: billing.ActionApprove}}}); err != nil {
		t.Fatal(err)
	}
	if v, err := f.svc.Approve(ctx, boss, down.ConfirmationID); err != nil || progress(v) != "1 of 3" {
		t.Fatalf("approval under a laxer policy: %s, %v; want 1 of 3", progress(v), err)
	}
	_, err = f.confirm(requester, billing.OpDowngrade, "pro", down.ConfirmToken)
	wantCode(t, err, billing.CodeApprovalPending)
}

// TestConcurrentApprovalsCount: approvers deciding at once are each
// counted (the row lock serializes them); the change is approved once.
func TestConcurrentApprovalsCount(t *testing.T) {
	ctx := context.Background()
	f := newApproversFixture(t, 0, billing.PolicyRule{Name: "r", Action: billing.ActionApprove, ApprovalsRequired: approvals(3)})
	p := f.propose(t, requester, billing.OpUpgrade, "scale")
	var wg sync.WaitGroup
	for _, who := range []billing.Caller{boss, carol, dave} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.svc.Approve(ctx, who, p.ConfirmationID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if c := f.confirmation(t, p.ConfirmationID); c.Approval != billing.ApprovalGranted || len(c.Approvers) != 3 {
		t.Fatalf("after three approvals at once: %s by %v", c.Approval, c.Approvers)
	}
}

package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/evidence"
)

// Several approvers and fail-closed expiry over REST, on real PostgreSQL
// (contract §10).

// confirmationListed is a confirmation as GET /api/billing/confirmations
// lists it, with its approval progress.
type confirmationListed struct {
	ID                string   `json:"id"`
	Approval          string   `json:"approval"`
	Approvers         []string `json:"approvers"`
	ApprovalsGiven    *int     `json:"approvals_given"`
	ApprovalsRequired *int     `json:"approvals_required"`
}

func (h *harness) listedConfirmation(org, id string) confirmationListed {
	h.t.Helper()
	r := h.do("GET", "/api/billing/confirmations", h.admin(org, "lister"), nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var body struct{ Confirmations []confirmationListed }
	r.decode(h.t, &body)
	for _, c := range body.Confirmations {
		if c.ID == id {
			return c
		}
	}
	h.t.Fatalf("confirmation %s not listed: %s", id, r.Body)
	return confirmationListed{}
}

func counts(given, required *int) string {
	if given == nil || required == nil {
		return "absent"
	}
	return fmt.Sprintf("%d of %d", *given, *required)
}

// TestSeveralApproversOverREST: a rule's approvals_required is validated
// (1–5), shown in the first call's details and the org's list, and met only
// by that many distinct people; approvals made at the same instant on two
// replicas all count, each audited once with its count; then the second
// call executes.
func TestSeveralApproversOverREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	other := h.replica()
	h.createOrg("many", "Many", "pro")
	for _, bad := range []string{"0", "6", "-1", `"two"`} {
		r := h.offSpec().do("PUT", "/api/billing/policy", h.admin("many", "policy-admin"),
			`{"rules":[{"name":"r","action":"approve","approvals_required":`+bad+`}]}`)
		wantStatus(t, r, http.StatusBadRequest, "invalid_request")
	}
	wantStatus(t, h.do("PUT", "/api/billing/policy", h.admin("many", "policy-admin"),
		`{"rules":[{"name":"r","action":"confirm","approvals_required":2}]}`), http.StatusBadRequest, "invalid_request")
	h.setPolicy("many", `{"agent_clients":["test-agent"],"approval_window_seconds":600,
		"rules":[{"name":"two","caller":"agent","action":"approve","approvals_required":2},
			{"name":"five","caller":"agent","to_plans":["scale"],"action":"approve","approvals_required":5}]}`)
	if r := h.do("GET", "/api/billing/policy", h.admin("many", "policy-admin"), nil); !strings.Contains(string(r.Body), `"approvals_required":5`) {
		t.Fatalf("policy read back: %s", r.Body)
	}

	agent := h.user("many", "agent-principal") // test-agent: an agent's token
	p := h.proposeApproval(agent, "scale")
	if got := counts(p.Details.ApprovalsGiven, p.Details.ApprovalsRequired); got != "0 of 5" {
		t.Fatalf("first call's details: %s approvals, want 0 of 5 (the strictest rule)", got)
	}
	path := "/api/billing/confirmations/" + p.ConfirmationID + "/approve"
	wantStatus(t, h.do("POST", path, h.admin("many", "agent-principal"), nil), http.StatusForbidden, "operation_denied")

	// Five admins approve at once, across both replicas; the first of them
	// twice more (counted once).
	approvers := []string{"ann", "ben", "cat", "dan", "eve"}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, who := range append(slices.Clone(approvers), "ann", "ann") {
		replica := h
		if i%2 == 1 {
			replica = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if r := replica.do("POST", path, replica.admin("many", who), nil); r.Status != http.StatusOK {
				t.Errorf("%s's approval: %d %s", who, r.Status, r.Body)
			}
		}()
	}
	close(start)
	wg.Wait()

	c := h.listedConfirmation("many", p.ConfirmationID)
	slices.Sort(c.Approvers)
	if c.Approval != "granted" || counts(c.ApprovalsGiven, c.ApprovalsRequired) != "5 of 5" || !slices.Equal(c.Approvers, approvers) {
		t.Fatalf("after five approvals at once: %+v (%s)", c, counts(c.ApprovalsGiven, c.ApprovalsRequired))
	}
	var reasons []string
	for _, e := range h.auditEvents("many") {
		if e.Event == billing.EventApprovalGranted && e.ConfirmationID == p.ConfirmationID {
			reasons = append(reasons, e.Reason)
		}
	}
	want := []string{"approvals 1 of 5", "approvals 2 of 5", "approvals 3 of 5", "approvals 4 of 5", "approvals 5 of 5"}
	if !slices.Equal(reasons, want) {
		t.Fatalf("APPROVAL_GRANTED reasons %q, want one per approver counting up to 5", reasons)
	}
	r := h.confirm(agent, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	if h.subscription(agent) != "scale" {
		t.Fatal("not on scale after five approvals")
	}
}

// TestTwoApproversOneAtATime: the second call waits (approval_pending)
// while one of two approvals is given.
func TestTwoApproversOneAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("pair", "Pair", "pro")
	h.setPolicy("pair", `{"rules":[{"name":"two","action":"approve","approvals_required":2}]}`)
	tok := h.user("pair", "rita")
	p := h.proposeApproval(tok, "scale")
	path := "/api/billing/confirmations/" + p.ConfirmationID + "/approve"
	r := h.do("POST", path, h.admin("pair", "boss"), nil)
	wantStatus(t, r, http.StatusOK, "")
	var v confirmationListed
	r.decode(t, &v)
	if v.Approval != "pending" || counts(v.ApprovalsGiven, v.ApprovalsRequired) != "1 of 2" {
		t.Fatalf("after one approval: %s", r.Body)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_pending")
	wantStatus(t, h.do("POST", path, h.admin("pair", "boss"), nil), http.StatusOK, "")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_pending")
	wantStatus(t, h.do("POST", path, h.admin("pair", "carl"), nil), http.StatusOK, "")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
}

// TestApprovalWindowEndsClosed: approvals not complete when the window
// ends reject the change by themselves (the settle round of any replica,
// without a call): APPROVAL_EXPIRED with reason expired, a second call
// answered approval_rejected saying so, and the audit chain still
// verifies.
func TestApprovalWindowEndsClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "1s"), withEnv("SETTLE_INTERVAL", "100ms"))
	h.createOrg("late", "Late", "pro")
	h.setPolicy("late", `{"rules":[{"name":"two","action":"approve","approvals_required":2}]}`)
	tok := h.user("late", "lou")
	p := h.proposeApproval(tok, "scale")
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("late", "boss"), nil),
		http.StatusOK, "")

	var expired *billing.AuditEvent
	for deadline := time.Now().Add(10 * time.Second); expired == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, e := range h.auditEvents("late") {
			if e.Event == billing.EventApprovalExpired {
				expired = &e
			}
		}
	}
	if expired == nil {
		t.Fatalf("no APPROVAL_EXPIRED without a call: %v", eventNames(h.auditEvents("late")))
	}
	if expired.Reason != "expired" || expired.ConfirmationID != p.ConfirmationID || expired.Principal != "lou" || expired.Outcome != "rejected" {
		t.Fatalf("APPROVAL_EXPIRED %+v", expired)
	}
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusConflict, "approval_rejected")
	if !strings.Contains(string(r.Body), "(expired)") {
		t.Fatalf("approval_rejected does not say it expired: %s", r.Body)
	}
	if h.subscription(tok) != "pro" {
		t.Fatal("an expired change was made")
	}
	rep, err := evidence.Verify(bytes.NewReader(h.exportAudit("late")), h.receiptKeys(), evidence.Options{})
	if err != nil || rep.Events == 0 {
		t.Fatalf("audit chain after an expiry: %+v, %v", rep, err)
	}
}

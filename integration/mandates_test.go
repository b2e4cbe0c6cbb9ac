package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/failpoint"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// Standing mandates (contract §13), end to end: a real billingd on a real
// PostgreSQL, the stateful Stripe fake.

// personAt is a person's token (the PERSON_CLIENTS client test-console)
// whose sign-in was at signedIn; admin adds billing:admin.
func (h *harness) personAt(org, principal string, signedIn time.Time, admin bool) string {
	h.t.Helper()
	scopes := []string{auth.ScopeRead, auth.ScopeWrite}
	if admin {
		scopes = append(scopes, auth.ScopeAdmin)
	}
	return mint(h.t, h, devissuer.Claims{Subject: principal, Org: org, Client: personClient, Scopes: scopes,
		Audience: []string{h.url}, Extra: map[string]any{"auth_time": signedIn.Unix()}})
}

// mandateGrant is a grant request with every bound; tests change one.
type mandateGrant struct {
	Client            string   `json:"client"`
	Operations        []string `json:"operations"`
	ToPlans           []string `json:"to_plans"`
	MaxAmountDueCents int64    `json:"max_amount_due_cents"`
	BudgetCents       int64    `json:"budget_cents"`
	MaxChanges        int      `json:"max_changes"`
	ExpiresAt         string   `json:"expires_at"`
	MaxQuantity       int64    `json:"max_quantity,omitempty"`
}

// generous lets test-agent make any change for an hour.
func generous() mandateGrant {
	return mandateGrant{Client: "test-agent", Operations: []string{"upgrade_plan", "downgrade_plan"},
		ToPlans: []string{"free", "pro", "scale"}, MaxAmountDueCents: 1_000_000, BudgetCents: 10_000_000, MaxChanges: 100,
		ExpiresAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
}

// grantMandate grants g as principal (a person, freshly signed in).
func (h *harness) grantMandate(org, principal string, g mandateGrant) billing.Mandate {
	h.t.Helper()
	r := h.do("POST", "/api/billing/mandates", h.personAt(org, principal, time.Now(), false), g)
	wantStatus(h.t, r, http.StatusCreated, "")
	var m billing.Mandate
	r.decode(h.t, &m)
	return m
}

// mandateOf reads principal's mandate id back.
func (h *harness) mandateOf(org, principal, id string) billing.Mandate {
	h.t.Helper()
	r := h.do("GET", "/api/billing/mandates", h.user(org, principal), nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var list struct{ Mandates []billing.Mandate }
	r.decode(h.t, &list)
	for _, m := range list.Mandates {
		if m.ID == id {
			return m
		}
	}
	h.t.Fatalf("mandate %s not listed: %s", id, r.Body)
	return billing.Mandate{}
}

// mandateCall is a first call by the agent test-agent for principal.
type mandateAnswer struct {
	executed
	ConfirmRequired bool   `json:"confirm_required"`
	ConfirmationID  string `json:"confirmation_id"`
	MandateID       string `json:"mandate_id"`
	Receipt         string `json:"receipt"`
}

func (h *harness) firstCall(token, op, to string) (response, mandateAnswer) {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, map[string]string{"to": to})
	var a mandateAnswer
	if r.Status < 300 {
		r.decode(h.t, &a)
	}
	return r, a
}

// TestMandateGrant: only a person with a fresh sign-in grants; every bound
// is required; the answer carries a JWS that verifies with the published
// receipt keys and states every bound with the request's names.
func TestMandateGrant(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mg", "Mandate Grant", "pro")
	g := generous()

	t.Run("an agent is refused", func(t *testing.T) {
		r := h.do("POST", "/api/billing/mandates", h.user("mg", "alice"), g)
		wantStatus(t, r, http.StatusForbidden, "operation_denied")
	})
	t.Run("a stale sign-in is refused", func(t *testing.T) {
		r := h.do("POST", "/api/billing/mandates", h.personAt("mg", "alice", time.Now().Add(-6*time.Minute), false), g)
		wantStatus(t, r, http.StatusUnauthorized, "insufficient_user_authentication")
		if ch := r.Header.Get("WWW-Authenticate"); !strings.Contains(ch, `error="insufficient_user_authentication"`) ||
			!strings.Contains(ch, "max_age=0") {
			t.Fatalf("challenge %q", ch)
		}
		r = h.do("POST", "/api/billing/mandates", h.admin("mg", "alice"), g) // no auth_time at all
		wantStatus(t, r, http.StatusUnauthorized, "insufficient_user_authentication")
	})
	t.Run("bad bounds", func(t *testing.T) {
		for name, body := range map[string]any{
			"no budget": map[string]any{"client": "test-agent", "operations": []string{"upgrade_plan"}, "to_plans": []string{"scale"}, "max_amount_due_cents": 1, "max_changes": 1, "expires_at": g.ExpiresAt},
			"91 days": func() mandateGrant {
				x := g
				x.ExpiresAt = time.Now().Add(91 * 24 * time.Hour).Format(time.RFC3339)
				return x
			}(),
			"past":         func() mandateGrant { x := g; x.ExpiresAt = time.Now().Add(-time.Minute).Format(time.RFC3339); return x }(),
			"no changes":   func() mandateGrant { x := g; x.MaxChanges = 0; return x }(),
			"unknown plan": func() mandateGrant { x := g; x.ToPlans = []string{"gold"}; return x }(),
			"operation":    func() mandateGrant { x := g; x.Operations = []string{"cancel"}; return x }(),
		} {
			r := h.offSpec().do("POST", "/api/billing/mandates", h.personAt("mg", "alice", time.Now(), false), body)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: status %d: %s", name, r.Status, r.Body)
			}
		}
	})
	t.Run("signed", func(t *testing.T) {
		m := h.grantMandate("mg", "alice", g)
		if !strings.HasPrefix(m.ID, "mdt_") || m.Status != "active" || m.SpentCents != 0 || m.Changes != 0 || m.JWS == "" {
			t.Fatalf("mandate %+v", m)
		}
		c, err := receipt.VerifyMandate(m.JWS, h.receiptKeys())
		if err != nil {
			t.Fatalf("mandate JWS: %v", err)
		}
		if c.Subject != "alice" || c.MandateID != m.ID || c.Org != "mg" || c.Client != "test-agent" ||
			c.BudgetCents != g.BudgetCents || c.MaxAmountDueCents != g.MaxAmountDueCents || c.MaxChanges != g.MaxChanges ||
			len(c.Operations) != 2 || len(c.ToPlans) != 3 || c.ExpiresAt.Format(time.RFC3339) != g.ExpiresAt || c.Currency != "usd" {
			t.Fatalf("claims %+v", c)
		}
		if _, err := receipt.Verify(m.JWS, h.receiptKeys()); err == nil {
			t.Fatal("a mandate passed for a receipt")
		}
		// Listed for alice and for an admin, not for bob.
		h.mandateOf("mg", "alice", m.ID)
		r := h.do("GET", "/api/billing/mandates", h.user("mg", "bob"), nil)
		if strings.Contains(string(r.Body), m.ID) {
			t.Fatal("bob sees alice's mandate")
		}
		r = h.do("GET", "/api/billing/mandates", h.admin("mg", "root"), nil)
		if !strings.Contains(string(r.Body), m.ID) {
			t.Fatal("an admin does not see the org's mandate")
		}
	})
}

// TestMandateCovers: a covered first call executes at once, answered 200
// with mandate_id, its receipt and OPERATION_EXECUTED carrying consent
// mandate; each bound not met, another client, another person, a revoked
// or expired mandate, and a policy stronger than confirm leave the
// ordinary handshake (or the policy's answer).
func TestMandateCovers(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mq", "Quote", "pro")
	quoted := h.propose(h.user("mq", "quoter"), "upgrade", "scale").Details.AmountDueNowCents
	if quoted <= 0 {
		t.Fatalf("quote %d", quoted)
	}
	n := 0
	org := func() string {
		n++
		id := fmt.Sprintf("mc%d", n)
		h.createOrg(id, "Mandate "+id, "pro")
		return id
	}
	agent := func(org, principal string) string { return h.user(org, principal) }

	t.Run("covered", func(t *testing.T) {
		o := org()
		m := h.grantMandate(o, "alice", generous())
		r, a := h.firstCall(agent(o, "alice"), "upgrade", "scale")
		wantStatus(t, r, http.StatusOK, "")
		if a.MandateID != m.ID || a.Subscription.Plan != "scale" || a.Receipt == "" || a.ConfirmRequired {
			t.Fatalf("answer %s", r.Body)
		}
		k := h.wantConsent(o, h.lastExecuted(o), billing.ConsentMandate, billing.HumanNone)
		if k.MandateID != m.ID {
			t.Fatalf("consent %+v", k)
		}
		got := h.mandateOf(o, "alice", m.ID)
		if got.SpentCents != quoted || got.Changes != 1 {
			t.Fatalf("spent %d in %d changes, want %d in 1", got.SpentCents, got.Changes, quoted)
		}
	})

	notCovered := func(t *testing.T, o, principal string) {
		t.Helper()
		r, a := h.firstCall(agent(o, principal), "upgrade", "scale")
		wantStatus(t, r, http.StatusAccepted, "")
		if !a.ConfirmRequired || a.MandateID != "" {
			t.Fatalf("answer %s", r.Body)
		}
	}
	for name, change := range map[string]func(*mandateGrant){
		"operation":    func(g *mandateGrant) { g.Operations = []string{"downgrade_plan"} },
		"plan":         func(g *mandateGrant) { g.ToPlans = []string{"pro", "free"} },
		"per change":   func(g *mandateGrant) { g.MaxAmountDueCents = quoted - 1 },
		"budget":       func(g *mandateGrant) { g.BudgetCents = quoted - 1 },
		"other client": func(g *mandateGrant) { g.Client = "other-agent" },
	} {
		t.Run(name, func(t *testing.T) {
			o := org()
			g := generous()
			change(&g)
			h.grantMandate(o, "alice", g)
			notCovered(t, o, "alice")
		})
	}
	t.Run("exact bounds", func(t *testing.T) {
		o := org()
		g := generous()
		g.Operations, g.ToPlans, g.MaxAmountDueCents, g.BudgetCents = []string{"upgrade_plan"}, []string{"scale"}, quoted, quoted
		h.grantMandate(o, "alice", g)
		r, _ := h.firstCall(agent(o, "alice"), "upgrade", "scale")
		wantStatus(t, r, http.StatusOK, "")
	})
	t.Run("another person", func(t *testing.T) {
		o := org()
		h.grantMandate(o, "alice", generous())
		notCovered(t, o, "bob")
	})
	t.Run("count", func(t *testing.T) {
		o := org()
		g := generous()
		g.MaxChanges = 1
		m := h.grantMandate(o, "alice", g)
		r, _ := h.firstCall(agent(o, "alice"), "upgrade", "scale")
		wantStatus(t, r, http.StatusOK, "")
		r, a := h.firstCall(agent(o, "alice"), "downgrade", "pro")
		wantStatus(t, r, http.StatusAccepted, "")
		if a.MandateID != "" {
			t.Fatalf("answer %s", r.Body)
		}
		if got := h.mandateOf(o, "alice", m.ID); got.Changes != 1 {
			t.Fatalf("changes %d", got.Changes)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		o := org()
		m := h.grantMandate(o, "alice", generous())
		r := h.do("DELETE", "/api/billing/mandates/"+m.ID, h.user(o, "bob"), nil)
		wantStatus(t, r, http.StatusNotFound, "not_found") // not bob's
		r = h.do("DELETE", "/api/billing/mandates/"+m.ID, h.personAt(o, "alice", time.Now(), false), nil)
		wantStatus(t, r, http.StatusOK, "")
		notCovered(t, o, "alice")
		if got := h.mandateOf(o, "alice", m.ID); got.Status != "revoked" || got.RevokedBy != "alice" {
			t.Fatalf("mandate %+v", got)
		}
		m2 := h.grantMandate(o, "alice", generous())
		r = h.do("DELETE", "/api/billing/mandates/"+m2.ID, h.admin(o, "root"), nil)
		wantStatus(t, r, http.StatusOK, "")
		notCovered(t, o, "alice")
	})
	t.Run("expired", func(t *testing.T) {
		o := org()
		g := generous()
		g.ExpiresAt = time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
		m := h.grantMandate(o, "alice", g)
		time.Sleep(3 * time.Second)
		notCovered(t, o, "alice")
		if got := h.mandateOf(o, "alice", m.ID); got.Status != "expired" {
			t.Fatalf("status %s", got.Status)
		}
	})
	for _, level := range []string{"approve", "verify", "deny"} {
		t.Run("never outranks "+level, func(t *testing.T) {
			o := org()
			h.grantMandate(o, "alice", generous())
			r := h.do("PUT", "/api/billing/policy", h.admin(o, "root"), map[string]any{"rules": []map[string]any{
				{"name": "careful", "operation": "upgrade_plan", "action": level}}})
			wantStatus(t, r, http.StatusOK, "")
			r, a := h.firstCall(agent(o, "alice"), "upgrade", "scale")
			if level == "deny" {
				wantStatus(t, r, http.StatusForbidden, "operation_denied")
				return
			}
			wantStatus(t, r, http.StatusAccepted, "")
			if a.MandateID != "" || !a.ConfirmRequired {
				t.Fatalf("answer %s", r.Body)
			}
		})
	}
}

// TestMandateConcurrentReplicas: many covered first calls at once, on two
// billingd replicas, never spend more than the budget nor make more
// changes than max_changes.
func TestMandateConcurrentReplicas(t *testing.T) {
	h := newHarness(t)
	other := h.replica()
	replicas := []*harness{h, other}
	h.createOrg("mqq", "Quote", "free")
	quoted := h.propose(h.user("mqq", "quoter"), "upgrade", "scale").Details.AmountDueNowCents

	run := func(t *testing.T, org string, g mandateGrant) billing.Mandate {
		h.createOrg(org, "Concurrent "+org, "free")
		m := h.grantMandate(org, "alice", g)
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := replicas[i%2]
				tok := r.user(org, "alice")
				for j := range 4 {
					op, to := "upgrade", "scale"
					if (i+j)%2 == 1 {
						op, to = "downgrade", "free"
					}
					r.do("POST", "/api/billing/"+op, tok, map[string]string{"to": to})
				}
			}()
		}
		wg.Wait()
		got := h.mandateOf(org, "alice", m.ID)
		executed, spent := 0, int64(0)
		for _, e := range h.auditEvents(org) {
			if e.Event == billing.EventOperationExecuted {
				if e.Consent == nil || e.Consent.Method != billing.ConsentMandate || e.Consent.MandateID != m.ID {
					t.Fatalf("executed without the mandate: %+v", e)
				}
				executed++
			}
		}
		spent = got.SpentCents
		if executed != got.Changes || executed == 0 {
			t.Fatalf("%d executed, mandate counts %d", executed, got.Changes)
		}
		if got.Changes > g.MaxChanges || spent > g.BudgetCents {
			t.Fatalf("mandate overspent: %d changes (max %d), %d spent (budget %d)", got.Changes, g.MaxChanges, spent, g.BudgetCents)
		}
		t.Logf("%d changes, %d spent", got.Changes, spent)
		return got
	}
	t.Run("budget", func(t *testing.T) {
		g := generous()
		g.BudgetCents = 2*quoted + quoted/2 // two upgrades fit, not three
		got := run(t, "mcb", g)
		if got.SpentCents < 2*quoted {
			t.Logf("only %d of the budget spent", got.SpentCents)
		}
	})
	t.Run("count", func(t *testing.T) {
		g := generous()
		g.MaxChanges = 3
		run(t, "mcn", g)
	})
}

// TestMandateDecidedAgainUnderLocks: what the first call saw of the
// mandate is decided again under the locks, in the transaction that
// spends it. A mandate revoked (or spent, or shrunk) after the first
// call's look and before its execution leaves the ordinary handshake:
// nothing executes. The change is made at the instant the first call
// issues its confirmation, through a failpoint.
func TestMandateDecidedAgainUnderLocks(t *testing.T) {
	var mu sync.Mutex
	var org string                // the case's org
	var arm func(context.Context) // what happens when its first call issues
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req failpoint.Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		fire := arm
		if req.Step != billing.StepIssue.String() || req.Org != org {
			fire = nil
		}
		mu.Unlock()
		if fire != nil {
			fire(r.Context())
		}
		_ = json.NewEncoder(w).Encode(failpoint.Answer{Action: failpoint.ActionContinue})
	}))
	t.Cleanup(ctl.Close)
	h := newHarness(t, withEnv("BILLINGD_FAILPOINTS", ctl.URL))
	policy := func(rule string) string {
		return `INSERT INTO org_policies (org, policy, updated_by) SELECT org, '{"rules":[{"name":"now",` +
			rule + `}]}', 'root' FROM mandates WHERE id = $1`
	}
	for name, change := range map[string]string{
		"revoked":      `UPDATE mandates SET revoked_at = now(), revoked_by = 'alice' WHERE id = $1`,
		"expired":      `UPDATE mandates SET expires_at = now() WHERE id = $1`,
		"budget spent": `UPDATE mandates SET budget_cents = 0 WHERE id = $1`,
		// The policy turns while the first call quotes: decided again at
		// execution, as always; the agent gets the ordinary handshake
		// with what the policy now asks for.
		"policy turns to approve":        policy(`"action":"approve"`),
		"policy turns to approve by two": policy(`"action":"approve","approvals_required":2`),
		"policy turns to verify":         policy(`"action":"verify"`),
	} {
		t.Run(name, func(t *testing.T) {
			o := "ml" + strings.ReplaceAll(name, " ", "")
			h.createOrg(o, "Locks", "pro")
			mandate := h.grantMandate(o, "alice", generous()).ID
			mu.Lock()
			org, arm = o, func(ctx context.Context) {
				if _, err := h.db.Pool.Exec(ctx, change, mandate); err != nil {
					t.Error(err)
				}
			}
			mu.Unlock()
			r, a := h.firstCall(h.user(o, "alice"), "upgrade", "scale")
			mu.Lock()
			arm = nil
			mu.Unlock()
			wantStatus(t, r, http.StatusAccepted, "")
			if !a.ConfirmRequired || a.MandateID != "" {
				t.Fatalf("answer %s", r.Body)
			}
			var p proposal
			r.decode(t, &p)
			if strings.HasPrefix(name, "policy") {
				var flags struct {
					ApprovalRequired     bool `json:"approval_required"`
					VerificationRequired bool `json:"verification_required"`
					Details              struct {
						ApprovalsRequired int `json:"approvals_required"`
					} `json:"details"`
				}
				r.decode(t, &flags)
				if flags.ApprovalRequired != strings.Contains(name, "approve") || flags.VerificationRequired != strings.HasSuffix(name, "verify") {
					t.Fatalf("the proposal does not say what the policy now asks: %s", r.Body)
				}
				if strings.HasSuffix(name, "by two") && flags.Details.ApprovalsRequired != 2 {
					t.Fatalf("the proposal says %d approvers are needed, want the policy's 2: %s", flags.Details.ApprovalsRequired, r.Body)
				}
				if got := h.mandateOf(o, "alice", mandate); got.Changes != 0 {
					t.Fatalf("the mandate counts a change not made: %+v", got)
				}
				return
			}
			// The ordinary handshake goes on with the token it gave.
			wantStatus(t, h.confirm(h.user(o, "alice"), "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
			h.wantConsent(o, p.ConfirmationID, billing.ConsentAgentRelayed, billing.HumanNone)
			if got := h.mandateOf(o, "alice", mandate); got.Changes != 0 || got.SpentCents != 0 {
				t.Fatalf("the mandate counts a change it did not cover: %+v", got)
			}
		})
	}
}

// TestMandateOverMCP: get_subscription tells the agent which of its
// mandates (its client, its user) are active and what is left; a covered
// upgrade_plan executes at once under it, a call it does not cover is the
// ordinary handshake.
func TestMandateOverMCP(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mm", "Mandate MCP", "pro")
	g := generous()
	g.Client, g.Operations, g.ToPlans, g.MaxChanges = "mcp-agent", []string{"upgrade_plan"}, []string{"scale"}, 1
	m := h.grantMandate("mm", "alice", g)
	other := generous() // another client's: not listed to this agent
	other.Client = "other-agent"
	h.grantMandate("mm", "alice", other)

	cs, err := mcpDial(h.url, h.mcpUser("mm", "alice"), "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var sub struct {
		Plan     string
		Mandates []billing.MandatesLeft
	}
	structured(t, callTool(t, cs, "get_subscription", nil), &sub)
	if len(sub.Mandates) != 1 || sub.Mandates[0].ID != m.ID || sub.Mandates[0].ChangesLeft != 1 ||
		sub.Mandates[0].BudgetLeftCents != g.BudgetCents {
		t.Fatalf("mandates %+v", sub.Mandates)
	}
	var done struct {
		OK        bool   `json:"ok"`
		MandateID string `json:"mandate_id"`
	}
	structured(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &done)
	if !done.OK || done.MandateID != m.ID {
		t.Fatalf("upgrade_plan under the mandate: %+v", done)
	}
	sub.Mandates = nil
	structured(t, callTool(t, cs, "get_subscription", nil), &sub)
	if sub.Plan != "scale" || len(sub.Mandates) != 0 {
		t.Fatalf("after its one change: %+v", sub)
	}
	var p proposal
	structured(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro"}), &p)
	if !p.ConfirmRequired || p.ConfirmToken == "" {
		t.Fatalf("downgrade not covered: %+v", p)
	}
}

// TestMandateSpendGivenBack: a change under a mandate that Stripe
// definitely did not make (the card declined) leaves the mandate as it
// was: its one change is still there for the next covered call.
func TestMandateSpendGivenBack(t *testing.T) {
	h := newHarness(t)
	acct := h.createOrg("mgb", "Given Back", "pro")
	g := generous()
	g.MaxChanges = 1
	m := h.grantMandate("mgb", "alice", g)
	h.fake.FailNextForAt(acct.Subscription.StripeSubscriptionID, stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
	r, _ := h.firstCall(h.user("mgb", "alice"), "upgrade", "scale")
	wantStatus(t, r, http.StatusPaymentRequired, "payment_failed")
	if got := h.mandateOf("mgb", "alice", m.ID); got.Changes != 0 || got.SpentCents != 0 {
		t.Fatalf("a change not made counts: %+v", got)
	}
	r, a := h.firstCall(h.user("mgb", "alice"), "upgrade", "scale")
	wantStatus(t, r, http.StatusOK, "")
	if a.MandateID != m.ID {
		t.Fatalf("answer %s", r.Body)
	}
	if got := h.mandateOf("mgb", "alice", m.ID); got.Changes != 1 {
		t.Fatalf("after the change: %+v", got)
	}
}

// TestMandateSpendOutlivesThePurge: what a mandate spent is the sum of the
// changes made under it, and the purge of finished confirmations
// (PURGE_RETENTION) keeps those while the mandate is in force. Before, an
// hour after each change the mandate had its whole budget and every change
// back: the hostile review made a third change under a mandate of two.
func TestMandateSpendOutlivesThePurge(t *testing.T) {
	h := newHarness(t, withEnv("PURGE_RETENTION", "1h"))
	h.createOrg("mp", "Mandate Purge", "pro")
	quoted := h.propose(h.user("mp", "quoter"), "upgrade", "scale").Details.AmountDueNowCents
	g := generous()
	g.ToPlans, g.BudgetCents, g.MaxAmountDueCents, g.MaxChanges = []string{"pro", "scale"}, quoted, quoted, 2
	m := h.grantMandate("mp", "alice", g)
	agent := h.user("mp", "alice")
	for _, change := range [][2]string{{"upgrade", "scale"}, {"downgrade", "pro"}} {
		r, a := h.firstCall(agent, change[0], change[1])
		wantStatus(t, r, http.StatusOK, "")
		if a.MandateID != m.ID {
			t.Fatalf("%s under mandate %q, want %s", change[0], a.MandateID, m.ID)
		}
	}
	h.exec(t, `UPDATE confirmations SET finished_at = now() - interval '2 hours' WHERE org = 'mp' AND status = 'executed'`)
	h.app.PurgeOnce(context.Background())
	if got := h.mandateOf("mp", "alice", m.ID); got.SpentCents != quoted || got.Changes != 2 {
		t.Fatalf("after the purge: spent %d in %d changes, want %d in 2", got.SpentCents, got.Changes, quoted)
	}
	r, a := h.firstCall(agent, "upgrade", "scale")
	wantStatus(t, r, http.StatusAccepted, "")
	if a.MandateID != "" {
		t.Fatalf("a third change under a mandate of two (%s)", a.MandateID)
	}
	// Revoked, what it spent no longer matters: the purge takes it.
	wantStatus(t, h.do("DELETE", "/api/billing/mandates/"+m.ID, h.personAt("mp", "alice", time.Now(), false), nil), http.StatusOK, "")
	if n := h.app.PurgeOnce(context.Background()); n < 2 {
		t.Errorf("purged %d confirmations of a revoked mandate, want its 2", n)
	}
}

// TestMandateNeverCancelsAScheduledChange: keeping the plan against the
// person's own scheduled downgrade costs nothing now and the higher price
// at every renewal; no mandate covers it (the hostile review had a mandate
// of budget 0 cancel the person's downgrade at once).
func TestMandateNeverCancelsAScheduledChange(t *testing.T) {
	h := newHarness(t)
	h.createOrg("mk", "Mandate Keep", "scale")
	person := h.personAt("mk", "alice", time.Now(), false)
	p := h.proposeAt(person, "downgrade", "pro", "period_end")
	h.confirmAt(person, "downgrade", "pro", "period_end", p.ConfirmToken)
	g := generous()
	g.Operations, g.ToPlans, g.MaxAmountDueCents, g.BudgetCents, g.MaxChanges = []string{"upgrade_plan"}, []string{"scale"}, 0, 0, 1
	h.grantMandate("mk", "alice", g)
	r, a := h.firstCall(h.user("mk", "alice"), "upgrade", "scale")
	wantStatus(t, r, http.StatusAccepted, "")
	if a.MandateID != "" {
		t.Fatalf("a mandate cancelled the scheduled downgrade (%s)", a.MandateID)
	}
	if sub := h.subscriptionView(person); sub.ScheduledChange == nil {
		t.Fatal("the scheduled downgrade is gone")
	}
}

// TestMandateGrantNeedsTheVerifiedStrength: with VERIFY_ACR_VALUES, a
// mandate (many changes without asking) needs as strong a sign-in as one
// verified change: a fresh single-factor sign-in is 401 with the acr
// values asked for.
func TestMandateGrantNeedsTheVerifiedStrength(t *testing.T) {
	h := newHarness(t, withEnv("VERIFY_ACR_VALUES", "mfa"))
	h.createOrg("ma", "Mandate ACR", "pro")
	person := func(acr string) string {
		return mint(h.t, h, devissuer.Claims{Subject: "alice", Org: "ma", Client: personClient,
			Scopes: []string{auth.ScopeRead, auth.ScopeWrite}, Audience: []string{h.url},
			Extra: map[string]any{"auth_time": time.Now().Unix(), "acr": acr}})
	}
	r := h.do("POST", "/api/billing/mandates", person("pwd"), generous())
	wantStatus(t, r, http.StatusUnauthorized, "insufficient_user_authentication")
	if !strings.Contains(r.Header.Get("WWW-Authenticate"), `acr_values="mfa"`) {
		t.Errorf("WWW-Authenticate %q, want acr_values=\"mfa\"", r.Header.Get("WWW-Authenticate"))
	}
	wantStatus(t, h.do("POST", "/api/billing/mandates", person("mfa"), generous()), http.StatusCreated, "")
}

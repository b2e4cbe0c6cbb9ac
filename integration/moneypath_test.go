package integration

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The money path under real faults (issue 10): each test here failed on the
// code before the second call's transaction was made self-contained and its
// outcomes settled.

// TestSecondCallsOnSmallPool: sixteen concurrent second calls under a
// daily-limit policy on a pool of two connections, while Stripe answers
// slowly. Half execute, half are denied by the limit; none waits for a
// connection its own transaction holds back (before: the re-check asked the
// pool for a second connection while holding the first, and every call hung).
func TestSecondCallsOnSmallPool(t *testing.T) {
	// Not parallel: sixteen concurrent second calls on a two-connection pool, with a hang deadline.
	h := newHarness(t, withPoolMaxConns(2))
	h.fake.SetChaos(func(e stripepaytest.Endpoint) stripepaytest.Fault {
		if e == stripepaytest.UpdateSubscription {
			return stripepaytest.Delay(200 * time.Millisecond) // locks held across a slow answer
		}
		return stripepaytest.NoFault
	})
	type call struct {
		org, token string
		p          proposal
		to         string
		usedUp     bool
	}
	var calls []call
	for i := range 16 {
		org := "pool" + string(rune('a'+i))
		h.createOrg(org, org, "free")
		tok := h.user(org, "user-of-"+org)
		c := call{org: org, token: tok, to: "pro", usedUp: i%2 == 0}
		if c.usedUp { // today's one change is made already
			first := h.propose(tok, "upgrade", "pro")
			wantStatus(t, h.confirm(tok, "upgrade", "pro", first.ConfirmToken), http.StatusOK, "")
			c.to = "scale"
		}
		c.p = h.propose(tok, "upgrade", c.to)
		h.setPolicy(org, `{"rules":[],"daily_limit":1}`)
		calls = append(calls, c)
	}

	answers := make([]response, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { answers[i] = h.confirmWithin(20*time.Second, c.token, "upgrade", c.to, c.p.ConfirmToken) })
	}
	wg.Wait()
	for i, c := range calls {
		if c.usedUp {
			wantStatus(t, answers[i], http.StatusForbidden, "operation_denied")
			wantEventsEnd(t, h.auditEvents(c.org), "TOKEN_REVOKED:policy", "OPERATION_DENIED:daily limit")
		} else {
			wantStatus(t, answers[i], http.StatusOK, "")
		}
	}
}

// TestClientHangsUpDuringSlowStripe: the client gives up while Stripe is
// answering. The change Stripe made is recorded all the same (before: the
// transaction was rolled back with the client's context, and billingd showed
// the old plan while Stripe charged the new one).
func TestClientHangsUpDuringSlowStripe(t *testing.T) {
	// Not parallel: a 300 ms client timeout must fall inside a 1.5 s Stripe answer.
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("hangup")
	h.fake.FailNext(stripepaytest.Delay(1500 * time.Millisecond))
	if r, err := h.tryConfirm(300*time.Millisecond, tok, "upgrade", "scale", p.ConfirmToken); err == nil {
		t.Fatalf("the client should have given up, got %d %s", r.Status, r.Body)
	}
	h.eventually(5*time.Second, "the change Stripe made is recorded", func() bool { return h.subscription(tok) == "scale" })
	h.wantStripeChanges(acct, 1)
	wantEvents(t, h.auditEvents("hangup"), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
	replay := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, replay, http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

// TestUnknownOutcomeSettledWithoutRetry: Stripe's answer is lost and the
// client never retries. The reconciler every replica runs settles it: the
// change Stripe made is recorded, once.
func TestUnknownOutcomeSettledWithoutRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("SETTLE_INTERVAL", "300ms"))
	acct, tok, p := h.pendingUpgrade("orphan")
	h.fake.FailNext(stripepaytest.LoseResponse)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.eventually(10*time.Second, "the reconciler records the change", func() bool { return h.subscription(tok) == "scale" })
	h.wantStripeChanges(acct, 1)
	events := h.auditEvents("orphan")
	wantEvents(t, events, "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:outcome_unknown", "OPERATION_EXECUTED")
	if last := events[len(events)-1]; last.Principal != "user-of-orphan" || last.RequestID != "settle" {
		t.Fatalf("settled change audited as %+v", last)
	}
}

// TestStripeServerErrorSettledByReconciler: a 500 Stripe saved under the
// key, no retry by the client: the reconciler reads the subscription back,
// sees nothing applied, and executes under the next key.
func TestStripeServerErrorSettledByReconciler(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("SETTLE_INTERVAL", "300ms"))
	acct, tok, p := h.pendingUpgrade("fivehundred")
	h.fake.FailNext(stripepaytest.ServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.eventually(10*time.Second, "the reconciler executes the change", func() bool { return h.subscription(tok) == "scale" })
	h.wantStripeChanges(acct, 1)
	if n := h.fake.RequestCount(stripepaytest.GetSubscription); n < 1 {
		t.Fatalf("settled without reading the subscription back (%d reads)", n)
	}
}

// TestWebhookSettlesUnknownOutcome: a webhook in Stripe's current API shape
// (2025-03-31.basil: the period end on the items) names the confirmation
// whose answer was lost. It is recorded as executed there, and the owner's
// retry is answered with that result.
func TestWebhookSettlesUnknownOutcome(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret), withEnv("SETTLE_INTERVAL", "1h"))
	acct, tok, p := h.pendingUpgrade("hooked")
	h.fake.FailNext(stripepaytest.LoseResponse)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	stripeSub, _ := h.fake.Subscription(acct.Subscription.StripeSubscriptionID)
	if stripeSub.Metadata["billingd_confirmation_id"] != p.ConfirmationID {
		t.Fatalf("Stripe's metadata %v does not name the confirmation", stripeSub.Metadata)
	}
	event := basilSubscription(stripeSub.ID, stripeSub.Items[0].ID, "price_billingd_scale", stripeSub.CurrentPeriodEnd, stripeSub.Metadata)
	wantStatus(t, h.sendWebhook("evt_settle", "customer.subscription.updated", time.Now(), event, webhookSecret), http.StatusOK, "")
	if plan := h.subscription(tok); plan != "scale" {
		t.Fatalf("plan after the webhook: %s", plan)
	}
	wantEventsEnd(t, h.auditEvents("hooked"), "OPERATION_EXECUTED")
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	var res executed
	r.decode(t, &res)
	if !res.Replayed || !strings.HasPrefix(res.Subscription.CurrentPeriodEnd, stripeSub.CurrentPeriodEnd.UTC().Format("2006-01-02T15:04")) {
		t.Fatalf("retry after the webhook: %s", r.Body)
	}
	h.wantStripeChanges(acct, 1)
}

// TestWebhookBasilPeriodEnd: a renewal announced by an event in the
// 2025-03-31.basil shape, where the subscription has no current_period_end
// of its own, moves the stored period end to Stripe's.
func TestWebhookBasilPeriodEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("renew", "Renew", "pro")
	tok := h.user("renew", "ren")
	next := time.Now().Add(60 * 24 * time.Hour).UTC().Truncate(time.Second)
	h.changeInDashboard(acct.Subscription.StripeSubscriptionID, func(s *stripepaytest.Subscription) {
		s.CurrentPeriodStart, s.CurrentPeriodEnd = s.CurrentPeriodEnd, next
	})
	event := basilSubscription(acct.Subscription.StripeSubscriptionID, acct.Subscription.StripeItemID, "price_billingd_pro", next, nil)
	wantStatus(t, h.sendWebhook("evt_renew", "customer.subscription.updated", time.Now(), event, webhookSecret), http.StatusOK, "")
	r := h.do("GET", "/api/billing/subscription", tok, nil)
	var sub struct {
		CurrentPeriodEnd time.Time `json:"current_period_end"`
	}
	r.decode(t, &sub)
	if !sub.CurrentPeriodEnd.Equal(next) {
		t.Fatalf("period end %s, want %s", sub.CurrentPeriodEnd, next)
	}
}

// basilSubscription is a subscription object as Stripe sends it from API
// version 2025-03-31.basil on: current_period_end only on the items.
func basilSubscription(id, itemID, price string, periodEnd time.Time, metadata map[string]string) map[string]any {
	if metadata == nil {
		metadata = map[string]string{}
	}
	return map[string]any{
		"id": id, "object": "subscription", "status": "active", "metadata": metadata,
		"items": map[string]any{"object": "list", "data": []any{map[string]any{
			"id": itemID, "object": "subscription_item", "current_period_end": periodEnd.Unix(),
			"price": map[string]any{"id": price, "object": "price"},
		}}},
	}
}

// TestApprovalAddedAfterIssue: a policy tightened to approve after the token
// was issued stops it until another admin approves (before: only deny was
// checked again, and the token executed).
func TestApprovalAddedAfterIssue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("tight")
	h.setPolicy("tight", `{"rules":[{"name":"approve all","action":"approve"}]}`)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_pending")
	h.wantStripeChanges(acct, 0)
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("tight", "boss"), nil), http.StatusOK, "")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

// TestAgentRuleAcrossChannels: a token issued over REST to a user and
// redeemed over MCP is redeemed by an agent; a token issued to an agent over
// MCP stays an agent's when redeemed over REST. Either way an agent rule
// added after issue applies (before: the second case skipped it, and only
// deny rules were checked again at all).
func TestAgentRuleAcrossChannels(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const agentsApprove = `{"rules":[{"name":"agents need approval","caller":"agent","action":"approve"}]}`

	t.Run("issued over REST, redeemed over MCP", func(t *testing.T) {
		acct, tok, p := h.pendingUpgrade("restmcp")
		h.setPolicy("restmcp", agentsApprove)
		cs := mcpConnect(t, h.url, h.mcpUser("restmcp", "user-of-restmcp"), "")
		wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), "approval_pending")
		h.wantStripeChanges(acct, 0)
		_ = tok
	})
	t.Run("issued over MCP, redeemed over REST", func(t *testing.T) {
		acct := h.createOrg("mcprest", "mcprest", "pro")
		cs := mcpConnect(t, h.url, h.mcpUser("mcprest", "mo"), "")
		var p proposal
		wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
		h.setPolicy("mcprest", agentsApprove)
		wantStatus(t, h.confirm(h.user("mcprest", "mo"), "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "approval_pending")
		h.wantStripeChanges(acct, 0)
	})
}

// TestDeniedFirstCallsAreCheap: first calls a rule denies whatever the price
// cost no Stripe request and count against the issuance rate limit (before:
// twenty denied calls made twenty previews and were never limited).
func TestDeniedFirstCallsAreCheap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_PROPOSALS", "5"), withEnv("RATE_LIMIT_WINDOW", "1m"))
	h.createOrg("cheap", "Cheap", "pro")
	h.setPolicy("cheap", `{"rules":[{"name":"no scale","to_plans":["scale"],"action":"deny"}]}`)
	tok := h.user("cheap", "den")
	count := map[string]int{}
	for range 20 {
		count[h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`).errorCode(t)]++
	}
	if count["operation_denied"] != 5 || count["rate_limited"] != 15 {
		t.Fatalf("answers %v, want 5 operation_denied then rate_limited", count)
	}
	if n := h.fake.RequestCount(stripepaytest.CreatePreview); n != 0 {
		t.Fatalf("denied first calls made %d Stripe previews", n)
	}
}

// TestStrictJSONAtEveryDepth: repeated or re-cased keys inside nested
// objects, and null where a string is required, are refused; nothing is
// stored or superseded (before: the nested duplicate was stored as its last
// value, and "confirm_token": null was a first call that voided the
// caller's pending token).
func TestStrictJSONAtEveryDepth(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, tok, p := h.pendingUpgrade("strict")
	admin := h.admin("strict", "ada")
	for name, body := range map[string]string{
		"re-cased nested key": `{"rules":[{"name":"x","ACTION":"deny","action":"allow"}]}`,
		"repeated nested key": `{"rules":[{"name":"x","action":"deny","action":"allow"}]}`,
		"null nested string":  `{"rules":[{"name":null,"action":"allow"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := h.offSpec().do("PUT", "/api/billing/policy", admin, body)
			wantStatus(t, r, http.StatusBadRequest, "invalid_request")
			if !strings.Contains(string(r.Body), "rules[0]") {
				t.Fatalf("message does not say where: %s", r.Body)
			}
		})
	}
	if r := h.do("GET", "/api/billing/policy", admin, nil); !strings.Contains(string(r.Body), `"rules":[]`) {
		t.Fatalf("a refused policy was stored: %s", r.Body)
	}
	wantStatus(t, h.offSpec().do("POST", "/api/billing/upgrade", tok, `{"to":"scale","confirm_token":null}`), http.StatusBadRequest, "invalid_request")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
}

// confirmWithin makes a second call that the client gives up on after d.
func (h *harness) confirmWithin(d time.Duration, token, op, to, confirmToken string) response {
	h.t.Helper()
	r, err := h.tryConfirm(d, token, op, to, confirmToken)
	if err != nil {
		h.t.Errorf("second call gave no answer within %s: %v", d, err)
	}
	return r
}

// tryConfirm makes a second call with a client that gives up after d.
func (h *harness) tryConfirm(d time.Duration, token, op, to, confirmToken string) (response, error) {
	return h.tryChange(d, token, op, `{"to":"`+to+`","confirm_token":"`+confirmToken+`"}`)
}

// eventually polls cond until it holds or d has passed.
func (h *harness) eventually(d time.Duration, what string, cond func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			h.t.Fatalf("after %s: not true that %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantEventsEnd requires the audit log to end with the events named as
// wantEvents names them.
func wantEventsEnd(t *testing.T, got []billing.AuditEvent, want ...string) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("audit %v, want it to end with %v", eventNames(got), want)
	}
	wantEvents(t, got[len(got)-len(want):], want...)
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestRateLimitProposals: a principal's first calls are limited across
// replicas, because the count lives in the shared database.
func TestRateLimitProposals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_PROPOSALS", "3"), withEnv("RATE_LIMIT_WINDOW", "1m"))
	other := h.replica()
	h.createOrg("busy", "Busy", "pro")
	tok := h.user("busy", "bea")
	h.propose(tok, "upgrade", "scale")
	h.propose(tok, "upgrade", "scale")
	other.propose(tok, "upgrade", "scale")
	r := other.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`)
	wantStatus(t, r, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`), http.StatusTooManyRequests, "rate_limited")
	h.propose(h.user("busy", "ben"), "upgrade", "scale") // another principal is not limited
}

// TestRateLimitFailedConfirms: after too many rejected second calls even a
// valid token waits.
func TestRateLimitFailedConfirms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("RATE_LIMIT_FAILED_CONFIRMS", "2"))
	h.createOrg("guess", "Guess", "pro")
	tok := h.user("guess", "gil")
	p := h.propose(tok, "upgrade", "scale")
	for i := 0; i < 2; i++ {
		wantStatus(t, h.confirm(tok, "upgrade", "scale", fmt.Sprintf("pbc_%043d", i)), http.StatusConflict, "consent_token_invalid")
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusTooManyRequests, "rate_limited")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan %s", sub)
	}
}

const webhookSecret = "whsec_test_billingd"

// sendWebhook posts a signed subscription event and returns the response.
func (h *harness) sendWebhook(eventID, eventType string, created time.Time, sub map[string]any, secret string) response {
	h.t.Helper()
	payload, err := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "type": eventType, "created": created.Unix(),
		"api_version": "2024-09-30.acacia", "data": map[string]any{"object": sub},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: time.Now()})
	req, _ := http.NewRequest("POST", h.url+"/webhooks/stripe", strings.NewReader(string(payload)))
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	return h.send(req)
}

func stripeSubscription(id, itemID, price, status string, periodEnd time.Time) map[string]any {
	return map[string]any{
		"id": id, "object": "subscription", "status": status, "current_period_end": periodEnd.Unix(),
		"items": map[string]any{"object": "list", "data": []any{map[string]any{
			"id": itemID, "object": "subscription_item", "price": map[string]any{"id": price, "object": "price"},
		}}},
	}
}

// TestWebhookDrift: a subscription changed outside billingd (in Stripe's
// dashboard) is reconciled on the webhook, from Stripe's state rather than
// the event's, and every pending confirmation whose summary no longer holds
// is revoked.
func TestWebhookDrift(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("drift", "Drift", "pro")
	sub := acct.Subscription
	tok := h.user("drift", "dee")
	p := h.propose(tok, "upgrade", "scale")
	now := time.Now()
	changed := stripeSubscription(sub.StripeSubscriptionID, sub.StripeItemID, "price_billingd_free", "active", sub.CurrentPeriodEnd)

	t.Run("bad signature changes nothing", func(t *testing.T) {
		wantStatus(t, h.sendWebhook("evt_forged", "customer.subscription.updated", now, changed, "whsec_wrong"), 400, "invalid_request")
		if plan := h.subscription(tok); plan != "pro" {
			t.Fatalf("forged webhook changed the plan to %s", plan)
		}
	})
	t.Run("change is applied and pending tokens revoked", func(t *testing.T) {
		h.changeInDashboard(sub.StripeSubscriptionID, func(s *stripepaytest.Subscription) { s.Items[0].PriceID = "price_billingd_free" })
		r := h.sendWebhook("evt_1", "customer.subscription.updated", now, changed, webhookSecret)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"outcome":"applied"`) {
			t.Fatalf("webhook: %d %s", r.Status, r.Body)
		}
		if plan := h.subscription(tok); plan != "free" {
			t.Fatalf("plan after webhook: %s", plan)
		}
		wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	})
	t.Run("duplicate event is ignored", func(t *testing.T) {
		r := h.sendWebhook("evt_1", "customer.subscription.updated", now, changed, webhookSecret)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"outcome":"duplicate"`) {
			t.Fatalf("duplicate: %d %s", r.Status, r.Body)
		}
	})
	t.Run("an older event's content cannot move billingd off Stripe's state", func(t *testing.T) {
		old := stripeSubscription(sub.StripeSubscriptionID, sub.StripeItemID, "price_billingd_scale", "active", sub.CurrentPeriodEnd)
		r := h.sendWebhook("evt_0", "customer.subscription.updated", now.Add(-time.Minute), old, webhookSecret)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"outcome":"unchanged"`) || h.subscription(tok) != "free" {
			t.Fatalf("old event: %d %s", r.Status, r.Body)
		}
	})
	t.Run("echo of the current state keeps tokens", func(t *testing.T) {
		fresh := h.propose(tok, "upgrade", "pro")
		r := h.sendWebhook("evt_2", "customer.subscription.updated", now.Add(time.Second), changed, webhookSecret)
		if !strings.Contains(string(r.Body), `"outcome":"unchanged"`) {
			t.Fatalf("echo: %d %s", r.Status, r.Body)
		}
		wantStatus(t, h.confirm(tok, "upgrade", "pro", fresh.ConfirmToken), http.StatusOK, "")
	})
	t.Run("deleted subscription", func(t *testing.T) {
		h.changeInDashboard(sub.StripeSubscriptionID, func(s *stripepaytest.Subscription) { s.Status = "canceled" })
		r := h.sendWebhook("evt_3", "customer.subscription.deleted", now.Add(2*time.Second), changed, webhookSecret)
		if r.Status != 200 {
			t.Fatalf("deleted: %d %s", r.Status, r.Body)
		}
		got := h.do("GET", "/api/billing/subscription", tok, nil)
		if !strings.Contains(string(got.Body), `"status":"canceled"`) {
			t.Fatalf("after delete: %s", got.Body)
		}
	})
	t.Run("other event types are acknowledged", func(t *testing.T) {
		r := h.sendWebhook("evt_4", "invoice.paid", now, map[string]any{"id": "in_1", "object": "invoice"}, webhookSecret)
		wantStatus(t, r, 200, "")
	})
	names := strings.Join(eventNames(h.auditEvents("drift")), " ")
	if !strings.Contains(names, "TOKEN_REVOKED:drift") {
		t.Fatalf("no drift revocation in %s", names)
	}
}

// changeInDashboard changes a subscription at the Stripe fake as a person
// in Stripe's dashboard would.
func (h *harness) changeInDashboard(subscriptionID string, edit func(*stripepaytest.Subscription)) {
	h.t.Helper()
	if err := h.fake.ChangeInDashboard(subscriptionID, edit); err != nil {
		h.t.Fatal(err)
	}
}

func TestWebhookWithoutSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.sendWebhook("evt_1", "customer.subscription.updated", time.Now(), map[string]any{"id": "sub_1"}, "whsec_x")
	wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
}

// TestPurge: finished and long-expired confirmations go after the retention
// window; pending ones and the audit log stay.
func TestPurge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("PURGE_RETENTION", "1h"))
	h.createOrg("old", "Old", "pro")
	tok := h.user("old", "oz")
	done := h.propose(h.user("old", "al"), "upgrade", "scale")
	wantStatus(t, h.confirm(h.user("old", "al"), "upgrade", "scale", done.ConfirmToken), http.StatusOK, "")
	live := h.propose(tok, "downgrade", "pro")
	ctx := context.Background()
	// Age a copy of the finished confirmation and an expired pending one.
	for i, q := range []string{
		`INSERT INTO confirmations SELECT 'cfm_old_finished', sha256('a'), org, principal, client, operation, 'executed',
			from_plan, to_plan, from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency, proration_date,
			subscription_version, amount_due_cents, credit_cents, next_charge_at, summary, now() - interval '3 hours',
			now() - interval '3 hours', now() - interval '2 hours' FROM confirmations WHERE id = $1`,
		`INSERT INTO confirmations SELECT 'cfm_old_expired', sha256('b'), org, 'someone', client, operation, 'pending',
			from_plan, to_plan, from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency, proration_date,
			subscription_version, amount_due_cents, credit_cents, next_charge_at, summary, now() - interval '3 hours',
			now() - interval '2 hours', NULL FROM confirmations WHERE id = $1`,
	} {
		if _, err := h.db.Pool.Exec(ctx, q, done.ConfirmationID); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	auditBefore := len(h.auditEvents("old"))
	if n := h.app.PurgeOnce(ctx); n != 2 {
		t.Fatalf("purged %d, want 2", n)
	}
	var left []string
	rows, _ := h.db.Pool.Query(ctx, `SELECT id FROM confirmations ORDER BY id`)
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	if len(left) != 2 || !contains(left, live.ConfirmationID) || !contains(left, done.ConfirmationID) {
		t.Fatalf("left %v", left)
	}
	if got := len(h.auditEvents("old")); got != auditBefore {
		t.Fatalf("audit events %d, want %d", got, auditBefore)
	}
	wantStatus(t, h.confirm(tok, "downgrade", "pro", live.ConfirmToken), http.StatusOK, "")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

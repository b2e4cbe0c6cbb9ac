package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// TestUpgradeHandshake runs the two calls against stripe-mock: the first call
// changes nothing and returns a token and a summary; the second executes.
func TestUpgradeHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("vector", "Vector Build", "pro")
	tok := h.user("vector", "alice")

	p := h.propose(tok, "upgrade", "scale")
	switch {
	case !p.ConfirmRequired, !strings.HasPrefix(p.ConfirmToken, "pbc_"), len(p.ConfirmToken) > 80:
		t.Fatalf("bad proposal: %+v", p)
	case p.Operation != "upgrade_plan" || p.TTLSeconds != 60 || p.ExpiresAt == "" || p.ConfirmationID == "":
		t.Fatalf("bad proposal: %+v", p)
	case !strings.HasPrefix(p.Summary, "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $"):
		t.Fatalf("summary %q", p.Summary)
	case p.Details.From != "pro" || p.Details.To != "scale" || p.Details.Currency != "usd":
		t.Fatalf("details %+v", p.Details)
	}
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("first call changed the plan to %s", sub)
	}

	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	var done executed
	r.decode(t, &done)
	if !done.OK || done.Subscription.Plan != "scale" || done.Subscription.Status == "" {
		t.Fatalf("second call: %s", r.Body)
	}
	if sub := h.subscription(tok); sub != "scale" {
		t.Fatalf("plan after confirm: %s", sub)
	}

	// Single use: the owner repeating the call gets the original answer,
	// replayed; other parameters or another caller get nothing.
	again := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, again, http.StatusOK, "")
	var replay executed
	again.decode(t, &replay)
	if !replay.Replayed || replay.Subscription != done.Subscription {
		t.Fatalf("repeated second call: %s, want the original answer with replayed", again.Body)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	wantStatus(t, h.confirm(h.user("vector", "mallory"), "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")

	events := h.auditEvents("vector")
	wantEvents(t, events, "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED", "TOKEN_REJECTED:used", "TOKEN_REJECTED:invalid")
	for _, e := range events {
		if e.Principal == "mallory" {
			continue
		}
		if e.Principal != "alice" || e.Client != "test-agent" || e.RequestID == "" {
			t.Fatalf("audit event lacks who/what: %+v", e)
		}
		if strings.Contains(e.ConfirmationID+e.Reason+e.Outcome, "pbc_") {
			t.Fatalf("audit event holds a token: %+v", e)
		}
	}
}

func TestDowngradeHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("acme", "Acme", "scale")
	tok := h.user("acme", "bob")
	p := h.propose(tok, "downgrade", "pro")
	if p.Operation != "downgrade_plan" ||
		!strings.HasPrefix(p.Summary, "Downgrade Acme from Scale ($49/mo) to Pro ($19/mo). Nothing is charged now;") ||
		p.Details.AmountDueNowCents != 0 {
		t.Fatalf("proposal %+v", p)
	}
	wantStatus(t, h.confirm(tok, "downgrade", "pro", p.ConfirmToken), http.StatusOK, "")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan after downgrade: %s", sub)
	}
	wantEvents(t, h.auditEvents("acme"), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
}

// TestSummaryMatchesCharge checks, with a provider that computes real
// prorations, that the amount quoted is the amount of the executed change.
func TestSummaryMatchesCharge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("quote", "Quote Co", "pro")
	tok := h.user("quote", "carol")
	p := h.propose(tok, "upgrade", "scale")
	if p.Details.AmountDueNowCents <= 0 || p.Details.AmountDueNowCents > 3000 {
		t.Fatalf("prorated amount %d, want between 0 and the $30 difference", p.Details.AmountDueNowCents)
	}
	want := formatCents(p.Details.AmountDueNowCents)
	if !strings.Contains(p.Summary, want+" due now") {
		t.Fatalf("summary %q does not state %s", p.Summary, want)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	sub, _ := h.fake.Subscription(acct.Subscription.StripeSubscriptionID)
	if len(sub.Items) != 1 || sub.Items[0].PriceID != "price_billingd_scale" {
		t.Fatalf("subscription at Stripe after confirm: %+v", sub)
	}
}

func TestAlreadyOnPlanIsNoop(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("same", "Same", "pro")
	tok := h.user("same", "dan")
	r := h.do("POST", "/api/billing/upgrade", tok, map[string]string{"to": "pro"})
	wantStatus(t, r, http.StatusOK, "")
	var body executed
	r.decode(t, &body)
	if !body.OK || !body.Noop || body.ConfirmRequired == nil || *body.ConfirmRequired || body.Subscription.Plan != "pro" {
		t.Fatalf("no-op body: %s", r.Body)
	}
	if strings.Contains(string(r.Body), "pbc_") {
		t.Fatal("a no-op issued a token")
	}
	wantEvents(t, h.auditEvents("same"))
}

func TestPlanChangeErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("errs", "Errs", "pro")
	tok := h.user("errs", "erin")
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"unknown plan", "/api/billing/upgrade", `{"to":"enterprise"}`, 422, "unknown_plan"},
		{"upgrade to a cheaper plan", "/api/billing/upgrade", `{"to":"free"}`, 422, "invalid_plan_change"},
		{"downgrade to a dearer plan", "/api/billing/downgrade", `{"to":"scale"}`, 422, "invalid_plan_change"},
		{"unknown field", "/api/billing/upgrade", `{"to":"scale","force":true}`, 400, "invalid_request"},
		{"wrong type", "/api/billing/upgrade", `{"to":3}`, 400, "invalid_request"},
		{"not JSON", "/api/billing/upgrade", `to=scale`, 400, "invalid_request"},
		{"two objects", "/api/billing/upgrade", `{"to":"scale"}{"to":"free"}`, 400, "invalid_request"},
		{"empty body", "/api/billing/upgrade", ``, 400, "invalid_request"},
		{"missing to", "/api/billing/upgrade", `{}`, 400, "invalid_request"},
		{"plan id with a path", "/api/billing/upgrade", `{"to":"../scale"}`, 400, "invalid_request"},
		{"body over 64 KiB", "/api/billing/upgrade", `{"to":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "request_too_large"},
		{"unknown token", "/api/billing/upgrade", `{"to":"scale","confirm_token":"pbc_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`, 409, "consent_token_invalid"},
		{"token of the wrong shape", "/api/billing/upgrade", `{"to":"scale","confirm_token":"tok_123"}`, 409, "consent_token_invalid"},
		{"unknown route", "/api/billing/teleport", `{}`, 404, "not_found"},
		{"cancel unknown confirmation", "/api/billing/confirmations/cfm_nothing/cancel", nil, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := h
			if c.status == http.StatusBadRequest || c.status == http.StatusRequestEntityTooLarge || c.status == http.StatusNotFound {
				client = h.offSpec() // malformed or unknown on purpose
			}
			r := client.do("POST", c.path, tok, c.body)
			wantStatus(t, r, c.status, c.code)
			if r.Header.Get("X-Request-Id") == "" {
				t.Fatal("no X-Request-Id")
			}
			var body struct {
				Error struct {
					RequestID string `json:"request_id"`
				}
			}
			r.decode(t, &body)
			if body.Error.RequestID != r.Header.Get("X-Request-Id") {
				t.Fatalf("request_id %q, header %q", body.Error.RequestID, r.Header.Get("X-Request-Id"))
			}
		})
	}
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("a refused call changed the plan to %s", sub)
	}
}

func TestUnknownOrg(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tok := h.user("ghost", "gina")
	wantStatus(t, h.do("GET", "/api/billing/subscription", tok, nil), 404, "not_found")
	wantStatus(t, h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`), 404, "not_found")
}

// TestTokenOfAnotherOwner: a token presented by another principal or org is
// invalid for them, reveals nothing, and still works for its owner.
func TestTokenOfAnotherOwner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("one", "One", "pro")
	h.createOrg("two", "Two", "pro")
	owner := h.user("one", "olga")
	p := h.propose(owner, "upgrade", "scale")

	for name, tok := range map[string]string{
		"other principal, same org":    h.user("one", "mallory"),
		"same principal id, other org": h.user("two", "olga"),
		"admin of the same org":        h.admin("one", "root"),
	} {
		t.Run(name, func(t *testing.T) {
			wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
		})
	}
	if sub := h.subscription(h.user("two", "x")); sub != "pro" {
		t.Fatalf("the other org's plan changed to %s", sub)
	}
	wantStatus(t, h.confirm(owner, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
}

func TestExpiredToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "1s"))
	h.createOrg("late", "Late", "pro")
	tok := h.user("late", "lee")
	p := h.propose(tok, "upgrade", "scale")
	if p.TTLSeconds != 1 {
		t.Fatalf("ttl_seconds %d", p.TTLSeconds)
	}
	time.Sleep(1500 * time.Millisecond)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusGone, "consent_token_expired")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusGone, "consent_token_expired")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("expired token changed the plan to %s", sub)
	}
	wantEvents(t, h.auditEvents("late"), "TOKEN_ISSUED", "TOKEN_REJECTED:expired", "TOKEN_REJECTED:expired")
}

func TestClockSkewGrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("CONFIRM_TTL", "1s"), withEnv("CONFIRM_CLOCK_SKEW", "5s"))
	h.createOrg("skew", "Skew", "pro")
	tok := h.user("skew", "sam")
	p := h.propose(tok, "upgrade", "scale")
	time.Sleep(1500 * time.Millisecond)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
}

// TestSuperseding: a new first call voids the caller's earlier token for the
// same operation, but not another principal's or another operation's.
func TestSuperseding(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("sup", "Sup", "pro")
	alice, bob := h.user("sup", "alice"), h.user("sup", "bob")
	first := h.propose(alice, "upgrade", "scale")
	down := h.propose(alice, "downgrade", "free")
	bobs := h.propose(bob, "upgrade", "scale")
	second := h.propose(alice, "upgrade", "scale")

	wantStatus(t, h.confirm(alice, "upgrade", "scale", first.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	list := h.pendingIDs(alice)
	if len(list) != 2 || !list[down.ConfirmationID] || !list[second.ConfirmationID] {
		t.Fatalf("alice's pending confirmations: %v", list)
	}
	if !h.pendingIDs(h.admin("sup", "root"))[bobs.ConfirmationID] {
		t.Fatal("bob's confirmation was superseded by alice")
	}
	wantStatus(t, h.confirm(alice, "upgrade", "scale", second.ConfirmToken), http.StatusOK, "")
	names := strings.Join(eventNames(h.auditEvents("sup")), " ")
	if !strings.Contains(names, "TOKEN_REVOKED:superseded") {
		t.Fatalf("no superseded event in %s", names)
	}
}

// TestMismatch: a second call with other parameters fails and voids the
// token; so does one whose subscription changed after the summary.
func TestMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("mis", "Mis", "free")
	alice := h.user("mis", "alice")

	t.Run("other plan", func(t *testing.T) {
		p := h.propose(alice, "upgrade", "pro")
		wantStatus(t, h.confirm(alice, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
		wantStatus(t, h.confirm(alice, "upgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	})
	t.Run("other operation", func(t *testing.T) {
		p := h.propose(alice, "upgrade", "pro")
		wantStatus(t, h.confirm(alice, "downgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
		wantStatus(t, h.confirm(alice, "upgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	})
	t.Run("subscription changed since the summary", func(t *testing.T) {
		bob := h.user("mis", "bob")
		stale := h.propose(alice, "upgrade", "scale")
		p := h.propose(bob, "upgrade", "pro")
		wantStatus(t, h.confirm(bob, "upgrade", "pro", p.ConfirmToken), http.StatusOK, "")
		wantStatus(t, h.confirm(alice, "upgrade", "scale", stale.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
		if sub := h.subscription(alice); sub != "pro" {
			t.Fatalf("plan %s after a mismatching confirm", sub)
		}
	})
	if sub := h.subscription(alice); sub != "pro" {
		t.Fatalf("plan %s", sub)
	}
	names := strings.Join(eventNames(h.auditEvents("mis")), " ")
	if strings.Count(names, "TOKEN_REJECTED:mismatch") != 3 {
		t.Fatalf("want three mismatch rejections in %s", names)
	}
}

func TestCancelAndList(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("can", "Can", "pro")
	alice, bob := h.user("can", "alice"), h.user("can", "bob")
	p := h.propose(alice, "upgrade", "scale")
	other := h.propose(bob, "downgrade", "free")

	r := h.do("GET", "/api/billing/confirmations", alice, nil)
	wantStatus(t, r, http.StatusOK, "")
	if strings.Contains(string(r.Body), "pbc_") {
		t.Fatal("listing shows a token")
	}
	var list struct{ Confirmations []billing.ConfirmationView }
	r.decode(t, &list)
	if len(list.Confirmations) != 1 || list.Confirmations[0].ID != p.ConfirmationID ||
		list.Confirmations[0].Summary != p.Summary || list.Confirmations[0].Status != "pending" {
		t.Fatalf("alice's list: %s", r.Body)
	}
	if got := h.pendingIDs(h.admin("can", "root")); len(got) != 2 {
		t.Fatalf("admin sees %v", got)
	}

	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+other.ConfirmationID+"/cancel", alice, nil), 404, "not_found")
	path := "/api/billing/confirmations/" + p.ConfirmationID + "/cancel"
	r = h.do("POST", path, alice, nil)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `"status":"cancelled"`) {
		t.Fatalf("cancel body %s", r.Body)
	}
	wantStatus(t, h.do("POST", path, alice, nil), http.StatusOK, "") // idempotent
	wantStatus(t, h.confirm(alice, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+other.ConfirmationID+"/cancel", h.admin("can", "root"), nil), http.StatusOK, "")
	if got := h.pendingIDs(h.admin("can", "root")); len(got) != 0 {
		t.Fatalf("still pending: %v", got)
	}
}

func TestReadEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("read", "Read", "pro")
	tok := h.token("read", "rita", "billing:read")
	r := h.do("GET", "/api/billing/plans", tok, nil)
	wantStatus(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.Body), `{"id":"pro","name":"Pro","amount_cents":1900,"currency":"usd","currency_exponent":2,"currency_written_whole":false,"interval":"month"}`) ||
		strings.Contains(string(r.Body), "price_") {
		t.Fatalf("plans: %s", r.Body)
	}
	r = h.do("GET", "/api/billing/subscription", tok, nil)
	wantStatus(t, r, http.StatusOK, "")
	var sub billing.SubscriptionView
	r.decode(t, &sub)
	if sub.Org != "read" || sub.Plan != "pro" || sub.Status == "" || sub.CurrentPeriodEnd.IsZero() {
		t.Fatalf("subscription: %s", r.Body)
	}
	wantStatus(t, h.do("GET", "/healthz", "", nil), http.StatusOK, "")
	wantStatus(t, h.do("GET", "/readyz", "", nil), http.StatusOK, "")
}

func (h *harness) subscription(token string) string {
	h.t.Helper()
	r := h.do("GET", "/api/billing/subscription", token, nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var sub billing.SubscriptionView
	r.decode(h.t, &sub)
	return sub.Plan
}

func (h *harness) pendingIDs(token string) map[string]bool {
	h.t.Helper()
	r := h.do("GET", "/api/billing/confirmations", token, nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var list struct{ Confirmations []billing.ConfirmationView }
	r.decode(h.t, &list)
	ids := map[string]bool{}
	for _, c := range list.Confirmations {
		ids[c.ID] = true
	}
	return ids
}

func formatCents(c int64) string { return fmt.Sprintf("$%d.%02d", c/100, c%100) }

// TestHandshakeOnStripeMock: org creation and a first call against
// stripe-mock, which checks every request's wire format against Stripe's
// own API description. Its second call is refused as drift: billingd reads
// the subscription at Stripe before a change, and stripe-mock's is a fixture
// (the other tests run on the stateful fake for that).
func TestHandshakeOnStripeMock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withStripeMock())
	h.createOrg("wire", "Wire", "pro")
	tok := h.user("wire", "wendy")
	p := h.propose(tok, "upgrade", "scale")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	// A change of seats quotes in Stripe's wire format too. (stripe-mock's
	// fixture period has ended, so a cancellation, which the renewal could
	// overtake, is refused here: its requests are checked against
	// stripe-mock by TestStripeMockSeatsAndCancellation.)
	wantStatus(t, h.do("POST", "/api/billing/seats", tok, `{"quantity":3}`), http.StatusAccepted, "")
	wantStatus(t, h.do("POST", "/api/billing/cancel", tok, `{"at":"now"}`), http.StatusServiceUnavailable, "upstream_unavailable")
}

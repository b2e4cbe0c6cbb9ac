package integration

import (
	"github.com/billingd/billingd/billing"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestConcurrentSecondCalls: fifty second calls with one token at once:
// exactly one change reaches the payment provider, and every other call,
// made by the token's owner, gets that change's answer replayed.
func TestConcurrentSecondCalls(t *testing.T) {
	t.Parallel()
	// Every caller is admitted: beyond CONFIRM_CONCURRENCY (32 by default)
	// one would get 503 at once (TestFirstCallAnsweredWhileExecutionsWaitForStripe).
	h := newHarness(t, withEnv("CONFIRM_CONCURRENCY", "64"))
	acct, tok, p := h.pendingUpgrade("race")

	const callers = 50
	answers := make(chan response, callers)
	var start, done sync.WaitGroup
	start.Add(1)
	for range callers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			answers <- h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
		}()
	}
	start.Done()
	done.Wait()
	close(answers)
	executedOnce, replayed := 0, 0
	for r := range answers {
		wantStatus(t, r, http.StatusOK, "")
		var res executed
		r.decode(t, &res)
		if res.Replayed {
			replayed++
		} else {
			executedOnce++
		}
	}
	if executedOnce != 1 || replayed != callers-1 {
		t.Fatalf("%d executed and %d replayed, want 1 and %d", executedOnce, replayed, callers-1)
	}
	h.wantStripeChanges(acct, 1)
}

// TestConcurrentConfirmationsOfOneOrg: two principals confirm different
// changes of one subscription at once; one executes, the other's summary no
// longer holds.
func TestConcurrentConfirmationsOfOneOrg(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("pair", "Pair", "free")
	alice, bob := h.user("pair", "alice"), h.user("pair", "bob")
	pa := h.propose(alice, "upgrade", "pro")
	pb := h.propose(bob, "upgrade", "scale")
	results := make([]response, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); results[0] = h.confirm(alice, "upgrade", "pro", pa.ConfirmToken) }()
	go func() { defer wg.Done(); results[1] = h.confirm(bob, "upgrade", "scale", pb.ConfirmToken) }()
	wg.Wait()
	// The loser may come between the winner's recovery point and its
	// Stripe request: it is then told the subscription's change is being
	// settled (503), and its retry meets the mismatch.
	retries := []struct {
		tok, to string
		p       proposal
	}{{alice, "pro", pa}, {bob, "scale", pb}}
	for i, r := range results {
		if r.Status == http.StatusServiceUnavailable && r.errorCode(t) == "upstream_unavailable" {
			results[i] = h.confirm(retries[i].tok, "upgrade", retries[i].to, retries[i].p.ConfirmToken)
		}
	}
	ok, mismatch := 0, 0
	for _, r := range results {
		switch {
		case r.Status == http.StatusOK:
			ok++
		case r.Status == http.StatusConflict && r.errorCode(t) == "consent_token_mismatch":
			mismatch++
		}
	}
	if ok != 1 || mismatch != 1 {
		t.Fatalf("want one execution and one mismatch, got %d/%d", results[0].Status, results[1].Status)
	}
	h.wantStripeChanges(acct, 1)
}

// TestLostResponseRetry: Stripe executes the change but its answer is lost.
// billingd records the outcome as unknown (executing) and answers 503; the
// retry with the same token sends the same idempotency key, gets Stripe's
// saved answer, and the subscription changes exactly once. A third call is
// answered with the original result, replayed.
func TestLostResponseRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("lost")

	h.fake.FailNext(stripepaytest.LoseResponse)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("billingd recorded %s without an answer from Stripe", sub)
	}
	// While the outcome is unknown, no other change can be proposed.
	wantStatus(t, h.do("POST", "/api/billing/downgrade", tok, `{"to":"free"}`), http.StatusServiceUnavailable, "upstream_unavailable")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	if sub := h.subscription(tok); sub != "scale" {
		t.Fatalf("plan after retry: %s", sub)
	}
	replay := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, replay, http.StatusOK, "")
	var res executed
	replay.decode(t, &res)
	if !res.Replayed || res.Subscription.Plan != "scale" {
		t.Fatalf("repeated call after a lost response: %s", replay.Body)
	}
	h.wantStripeChanges(acct, 1)
	wantEvents(t, h.auditEvents("lost"),
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:outcome_unknown", "OPERATION_EXECUTED")
}

// TestStripeTimeoutRetry: Stripe is slower than STRIPE_TIMEOUT. The lock is
// released, the token stays redeemable, and the retry executes once.
func TestStripeTimeoutRetry(t *testing.T) {
	// Not parallel: measures how long the second call is held.
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"))
	acct, tok, p := h.pendingUpgrade("slow")

	h.fake.FailNext(stripepaytest.Delay(3 * time.Second))
	start := time.Now()
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	if waited := time.Since(start); waited > 2500*time.Millisecond {
		t.Fatalf("second call held for %s despite a 1s Stripe timeout", waited)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

// TestDeclinedCard: a definite refusal ends the confirmation as failed and
// leaves the subscription as it was.
func TestDeclinedCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("poor")

	h.fake.FailNext(stripepaytest.DeclineCard)
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusPaymentRequired, "payment_failed")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	if sub := h.subscription(tok); sub != "pro" {
		t.Fatalf("plan after a declined card: %s", sub)
	}
	h.wantStripeChanges(acct, 0)
	wantEvents(t, h.auditEvents("poor"),
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:payment_failed", "TOKEN_REJECTED:used")
}

// TestStripeServerError: Stripe answers 500 and saves that answer under the
// idempotency key, so retrying the same key could never succeed (issue 10,
// item 3). The retry reads the subscription back, sees the change was not
// applied, and executes it under the next attempt's key: the same token
// completes, exactly once.
func TestStripeServerError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("flaky")
	h.fake.FailNext(stripepaytest.ServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.wantStripeChanges(acct, 0)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
	if sub := h.subscription(tok); sub != "scale" {
		t.Fatalf("plan: %s", sub)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
	wantEvents(t, h.auditEvents("flaky"),
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:outcome_unknown", "OPERATION_EXECUTED")
}

// TestStripeConnectionReset: Stripe makes the change and the connection dies
// before the answer. Whether the HTTP client resends on its own (allowed: the
// request carries an idempotency key) or billingd answers 503 and the client
// retries, the subscription changes exactly once.
func TestStripeConnectionReset(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("reset")
	h.fake.FailNext(stripepaytest.DropConnection)
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	if r.Status == http.StatusServiceUnavailable {
		r = h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	}
	wantStatus(t, r, http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

// pendingUpgrade creates org on Pro at the Stripe fake and makes a first
// call to Scale for one of its users: where every exactly-once test starts.
func (h *harness) pendingUpgrade(org string) (acct billing.Account, token string, p proposal) {
	h.t.Helper()
	acct = h.createOrg(org, org, "pro")
	token = h.user(org, "user-of-"+org)
	return acct, token, h.propose(token, "upgrade", "scale")
}

// wantStripeChanges requires that the fake changed acct's subscription
// exactly n times (replays of an idempotency key do not count).
func (h *harness) wantStripeChanges(acct billing.Account, n int) {
	h.t.Helper()
	if got := h.fake.UpdateCount(acct.Subscription.StripeSubscriptionID); got != n {
		h.t.Fatalf("Stripe changed the subscription %d times, want %d", got, n)
	}
}

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// Load (contract §12, issue 20): second calls wait for Stripe on
// connections of their own, a first call never waits behind them, and a
// second call beyond what a replica holds open is turned away at once with
// its token intact. Nothing here measures speed (make bench does); the
// tests show who waits for whom, with Stripe held by the fake's Pacer.

// TestFirstCallAnsweredWhileExecutionsWaitForStripe: with every execution
// slot (CONFIRM_CONCURRENCY=2) waiting on a Stripe that does not answer, and
// a main pool of 2 connections, a first call is answered, and one more
// second call gets 503 upstream_unavailable with Retry-After at once (so
// does a webhook, which reads Stripe under its lock); its token executes,
// once, when Stripe answers again, and the webhook is taken then.
func TestFirstCallAnsweredWhileExecutionsWaitForStripe(t *testing.T) {
	// Held second calls give up on Stripe after STRIPE_TIMEOUT and free
	// their connections: far beyond the bound of the calls that must not
	// wait for them.
	h := newHarness(t, withPoolMaxConns(2), withEnv("CONFIRM_CONCURRENCY", "2"),
		withEnv("STRIPE_TIMEOUT", "90s"), withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	orgs := []string{"ld-a", "ld-b", "ld-c", "ld-d"}
	subs := map[string]string{}
	tokens := map[string]string{}
	for _, org := range orgs {
		subs[org] = h.createOrg(org, "Load "+org, "pro").Subscription.StripeSubscriptionID
		tokens[org] = h.user(org, "agent")
	}
	proposals := map[string]proposal{}
	for _, org := range []string{"ld-a", "ld-b", "ld-d"} {
		proposals[org] = h.propose(tokens[org], "upgrade", "scale")
	}

	pacer := h.fake.Pacer()
	release := pacer.Hold(stripepaytest.UpdateSubscription)
	t.Cleanup(release)
	held := make(chan response, 2)
	for _, org := range []string{"ld-a", "ld-b"} {
		go func() {
			r, err := h.tryPost(context.Background(), "/api/billing/upgrade", tokens[org],
				map[string]string{"to": "scale", "confirm_token": proposals[org].ConfirmToken})
			if err != nil {
				r = response{Status: -1, Body: []byte(err.Error())}
			}
			held <- r
		}()
	}
	waitFor(t, "both second calls waiting for Stripe", func() bool {
		return pacer.Waiting(stripepaytest.UpdateSubscription) == 2
	})

	// Every execution slot, and its connection, waits for Stripe.
	first, err := h.tryPost(bounded(t), "/api/billing/upgrade", tokens["ld-c"], map[string]string{"to": "scale"})
	if err != nil {
		t.Fatalf("first call while executions wait for Stripe: %v (it waited behind them)", err)
	}
	wantStatus(t, first, http.StatusAccepted, "")

	excess, err := h.tryPost(bounded(t), "/api/billing/upgrade", tokens["ld-d"],
		map[string]string{"to": "scale", "confirm_token": proposals["ld-d"].ConfirmToken})
	if err != nil {
		t.Fatalf("second call beyond CONFIRM_CONCURRENCY: %v (it queued)", err)
	}
	wantStatus(t, excess, http.StatusServiceUnavailable, "upstream_unavailable")
	if s, err := strconv.Atoi(excess.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q, want whole seconds ≥ 1", excess.Header.Get("Retry-After"))
	}
	if n := pacer.Waiting(stripepaytest.UpdateSubscription); n != 2 {
		t.Errorf("%d requests at Stripe, want the 2 admitted ones: the excess call must not reach Stripe", n)
	}
	// A webhook reads Stripe under its row lock too: it shares the slots,
	// and Stripe delivers it again after a 503.
	if err := h.fake.ChangeInDashboard(subs["ld-c"], func(s *stripepaytest.Subscription) {
		s.Metadata = map[string]string{"note": "edited"}
	}); err != nil {
		t.Fatal(err)
	}
	events := h.fake.Events()
	event := events[len(events)-1]
	wantStatus(t, h.deliver(event), http.StatusServiceUnavailable, "upstream_unavailable")

	release()
	for range 2 {
		r := <-held
		wantStatus(t, r, http.StatusOK, "")
	}
	wantStatus(t, h.deliver(event), http.StatusOK, "")
	// The excess call's token was left as it was: it executes now, once.
	wantStatus(t, h.confirm(tokens["ld-d"], "upgrade", "scale", proposals["ld-d"].ConfirmToken), http.StatusOK, "")
	for _, org := range []string{"ld-a", "ld-b", "ld-d"} {
		if n := h.fake.UpdateCount(subs[org]); n != 1 {
			t.Errorf("%s: %d Stripe updates, want 1", org, n)
		}
	}
}

// TestStripeRateLimitLeavesTokenRedeemable: Stripe's rate limiter refuses
// the update (429 rate_limit, which stripe-go never retries): a definite
// "not made". The second call answers 503 upstream_unavailable with
// Retry-After, nothing changed, and the same call with the same token then
// executes, once.
func TestStripeRateLimitLeavesTokenRedeemable(t *testing.T) {
	h := newHarness(t, withEnv("STRIPE_MAX_NETWORK_RETRIES", "2"))
	sub := h.createOrg("rl-org", "Rate Limited", "pro").Subscription.StripeSubscriptionID
	tok := h.user("rl-org", "agent")
	p := h.propose(tok, "upgrade", "scale")
	h.fake.Pacer().LimitNext(stripepaytest.UpdateSubscription, stripepaytest.RateLimit)

	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Error("503 for Stripe's rate limit without Retry-After")
	}
	if n := h.fake.UpdateCount(sub); n != 0 {
		t.Fatalf("%d updates after a 429, want 0", n)
	}

	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	if n := h.fake.UpdateCount(sub); n != 1 {
		t.Errorf("%d updates, want 1", n)
	}
	if got := h.fake.Pacer().Limited(); len(got) != 1 {
		t.Errorf("Stripe refused %d requests, want 1 (stripe-go must not retry a rate limit)", len(got))
	}
}

// TestStripeLockTimeoutRetried: with stripe-go's retries on, a 429
// lock_timeout is resent by stripe-go under the same idempotency key, and
// the one second call executes the change once.
func TestStripeLockTimeoutRetried(t *testing.T) {
	h := newHarness(t, withEnv("STRIPE_MAX_NETWORK_RETRIES", "1"))
	sub := h.createOrg("lt-org", "Lock Timeout", "pro").Subscription.StripeSubscriptionID
	tok := h.user("lt-org", "agent")
	p := h.propose(tok, "upgrade", "scale")
	pacer := h.fake.Pacer()
	pacer.LimitNext(stripepaytest.UpdateSubscription, stripepaytest.LockTimeout)

	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	if n := h.fake.UpdateCount(sub); n != 1 {
		t.Errorf("%d updates, want 1", n)
	}
	limited := pacer.Limited()
	if len(limited) != 1 || limited[0] != "billingd-"+p.ConfirmationID {
		t.Errorf("refused requests' keys %q, want the confirmation's key once", limited)
	}
	if n := pacer.Answered(stripepaytest.UpdateSubscription); n != 1 {
		t.Errorf("%d updates reached Stripe after the 429, want 1 (the retry)", n)
	}
}

// tryPost sends a JSON POST without failing the test, for goroutines and
// for calls that must not block: it returns the error instead.
func (h *harness) tryPost(ctx context.Context, path, token string, body any) (response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, bytes.NewReader(data))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	return readResponse(resp)
}

// bounded is a context for a call that must be answered while Stripe is
// held: generous, so it says "it waited behind the held calls", not "it
// was slow".
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFirstCallsNeverWaitOnSecondCalls (issue 29): one agent per org,
// upgrading and downgrading in turn, as the bench's clients do. While
// every org's second call is parked at Stripe, in its check of the
// subscription or in its update (holding the subscription's row lock and
// an execution slot), a first call is answered without waiting for them:
// for another org with a token, for the same org (another member's) after
// at most 50 ms for the row lock with 503 upstream_unavailable and
// Retry-After, as a change of that subscription is being made and a
// summary of it would be stale. The parked calls then finish, and the turn
// goes on.
func TestFirstCallsNeverWaitOnSecondCalls(t *testing.T) {
	for _, parked := range []stripepaytest.Endpoint{stripepaytest.GetSubscription, stripepaytest.UpdateSubscription} {
		t.Run(string(parked), func(t *testing.T) {
			h := newHarness(t, withPoolMaxConns(2), withEnv("CONFIRM_CONCURRENCY", "3"), withEnv("STRIPE_TIMEOUT", "90s"))
			busy := []string{"nw-a", "nw-b", "nw-c"}
			idle := []string{"nw-d", "nw-e"}
			agents, members := map[string]string{}, map[string]string{}
			for _, org := range append(slices.Clone(busy), idle...) {
				h.createOrg(org, "No wait "+org, "pro")
				agents[org], members[org] = h.user(org, "agent"), h.user(org, "member")
			}
			proposals := map[string]proposal{}
			for _, org := range busy {
				proposals[org] = h.propose(agents[org], "upgrade", "scale")
			}
			pacer := h.fake.Pacer()
			release := pacer.Hold(parked)
			t.Cleanup(release)
			done := make(chan response, len(busy))
			for _, org := range busy {
				go func() {
					r, err := h.tryPost(context.Background(), "/api/billing/upgrade", agents[org],
						map[string]string{"to": "scale", "confirm_token": proposals[org].ConfirmToken})
					if err != nil {
						r = response{Status: -1, Body: []byte(err.Error())}
					}
					done <- r
				}()
			}
			waitFor(t, "every second call parked at Stripe", func() bool { return pacer.Waiting(parked) == len(busy) })

			for _, org := range idle {
				r, err := h.tryPost(bounded(t), "/api/billing/upgrade", agents[org], map[string]string{"to": "scale"})
				if err != nil {
					t.Fatalf("%s: first call while other orgs' second calls wait for Stripe: %v (it waited behind them)", org, err)
				}
				wantStatus(t, r, http.StatusAccepted, "")
			}
			for _, org := range busy {
				r, err := h.tryPost(bounded(t), "/api/billing/downgrade", members[org], map[string]string{"to": "free"})
				if err != nil {
					t.Fatalf("%s: another member's first call while the org's change is at Stripe: %v (it waited behind it)", org, err)
				}
				wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
				if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
					t.Errorf("%s: Retry-After %q, want whole seconds ≥ 1", org, r.Header.Get("Retry-After"))
				}
			}

			release()
			for range busy {
				wantStatus(t, <-done, http.StatusOK, "")
			}
			// The turn goes on: each busy org's agent downgrades again.
			for _, org := range busy {
				p := h.propose(agents[org], "downgrade", "pro")
				wantStatus(t, h.confirm(agents[org], "downgrade", "pro", p.ConfirmToken), http.StatusOK, "")
			}
		})
	}
}

// TestReplaysDoNotStarveFirstCalls: an agent replaying its executed token
// in a loop holds its subscription's row lock for a round trip each time.
// Another person's first calls wait for such short holders (at most
// firstCallLockWait, 50 ms) instead of being turned away: with a first
// call that never waited at all (FOR SHARE NOWAIT), 35 to 39 of these 40
// were answered 503.
func TestReplaysDoNotStarveFirstCalls(t *testing.T) {
	h := newHarness(t)
	h.createOrg("rr", "Replays", "pro")
	mallory := h.user("rr", "mallory")
	p := h.propose(mallory, "upgrade", "scale")
	wantStatus(t, h.confirm(mallory, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	stop := make(chan struct{})
	var replays sync.WaitGroup
	for range 4 {
		replays.Add(1)
		go func() {
			defer replays.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.offSpec().do("POST", "/api/billing/upgrade", mallory, map[string]string{"to": "scale", "confirm_token": p.ConfirmToken})
			}
		}()
	}
	bob := h.user("rr", "bob")
	turnedAway := 0
	for range 40 {
		r := h.offSpec().do("POST", "/api/billing/downgrade", bob, map[string]string{"to": "pro"})
		switch r.Status {
		case http.StatusAccepted:
		case http.StatusServiceUnavailable:
			turnedAway++
		default:
			t.Fatalf("first call during replays: %d %s", r.Status, r.Body)
		}
	}
	close(stop)
	replays.Wait()
	if turnedAway >= 20 {
		t.Fatalf("%d of 40 first calls turned away while another agent replayed its token: replays starve first calls", turnedAway)
	}
	t.Logf("%d of 40 first calls turned away during the replays", turnedAway)
}

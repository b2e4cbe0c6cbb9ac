package stripepaytest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestRateLimitIsDefiniteAndNotRetried: Stripe's rate limiter (429
// rate_limit) is ErrRateLimited, changes nothing and keeps nothing under the
// key; stripe-go does not retry it even with retries on, and the same key
// executes afterwards.
func TestRateLimitIsDefiniteAndNotRetried(t *testing.T) {
	e := newEnv(t, stripepay.Config{MaxNetworkRetries: 2})
	e.fake.Pacer().LimitNext(stripepaytest.UpdateSubscription, stripepaytest.RateLimit)
	_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-rl")
	if !errors.Is(err, billing.ErrRateLimited) || !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrRateLimited (and ErrUnavailable)", err)
	}
	if errors.Is(err, billing.ErrProviderFailed) || errors.Is(err, billing.ErrProviderRejected) {
		t.Errorf("err = %v: a 429 is neither a 5xx nor a refusal of the change", err)
	}
	if got := e.fake.Pacer().Limited(); len(got) != 1 {
		t.Errorf("refused %d requests, want 1: stripe-go must not retry a rate limit", len(got))
	}
	e.wantUpdates(t, 0)
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-rl"); err != nil {
		t.Fatalf("the same key after the 429: %v", err)
	}
	e.wantUpdates(t, 1)
}

// TestLockTimeoutRetriedUnderSameKey: a 429 lock_timeout is resent by
// stripe-go (MaxNetworkRetries 1) with the same idempotency key, and the
// change is made once.
func TestLockTimeoutRetriedUnderSameKey(t *testing.T) {
	e := newEnv(t, stripepay.Config{MaxNetworkRetries: 1})
	pacer := e.fake.Pacer()
	pacer.LimitNext(stripepaytest.UpdateSubscription, stripepaytest.LockTimeout)
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-lt"); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got := pacer.Limited(); len(got) != 1 || got[0] != "key-lt" {
		t.Errorf("refused keys %q, want [key-lt]", got)
	}
	if n := pacer.Answered(stripepaytest.UpdateSubscription); n != 1 {
		t.Errorf("%d updates reached the fake, want 1", n)
	}
	e.wantUpdates(t, 1)
	if e.price(t) != priceScale {
		t.Errorf("price %s, want %s", e.price(t), priceScale)
	}
}

// TestRetriesNeverOutliveTheTimeout: a call and its retries together end
// by Config.Timeout; a request cut off by it is not resent.
func TestRetriesNeverOutliveTheTimeout(t *testing.T) {
	e := newEnv(t, stripepay.Config{MaxNetworkRetries: 3, Timeout: 200 * time.Millisecond})
	release := e.fake.Pacer().Hold(stripepaytest.UpdateSubscription)
	defer release()
	_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-to")
	if !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := e.fake.RequestCount(stripepaytest.UpdateSubscription) + e.fake.Pacer().Waiting(stripepaytest.UpdateSubscription); n > 1 {
		t.Errorf("%d requests, want 1: a timed-out request must not be resent", n)
	}
}

// TestPacerHoldsUntilReleased: a held request waits before it executes,
// and executes once released.
func TestPacerHoldsUntilReleased(t *testing.T) {
	e := newEnv(t, stripepay.Config{})
	pacer := e.fake.Pacer()
	release := pacer.Hold(stripepaytest.UpdateSubscription)
	done := make(chan error, 1)
	go func() {
		_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-held")
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for pacer.Waiting(stripepaytest.UpdateSubscription) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the request was not held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.wantUpdates(t, 0)
	release()
	if err := <-done; err != nil {
		t.Fatalf("apply: %v", err)
	}
	e.wantUpdates(t, 1)
}

// TestLatencyMean: the mean the bench divides by.
func TestLatencyMean(t *testing.T) {
	l := stripepaytest.Latency{Typical: 300 * time.Millisecond, Tail: 2 * time.Second, TailShare: 0.01}
	if got, want := l.Mean(), 317*time.Millisecond; got != want {
		t.Errorf("Mean = %s, want %s", got, want)
	}
}

package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestConnectionTerminatedAfterStripeIsOutcomeUnknown (issue 27, finding
// 4): the database drops the second call's connection (pg_terminate_backend:
// a restart, a failover) while Stripe makes the change. The answer is that
// the outcome is not yet known, never "nothing was changed", and the retry
// finds the change made, once.
func TestConnectionTerminatedAfterStripeIsOutcomeUnknown(t *testing.T) {
	// Not parallel: terminates database connections at a chosen moment.
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "20s"))
	acct, tok, p := h.pendingUpgrade("dropped")

	h.fake.FailNext(stripepaytest.Delay(2 * time.Second)) // the change is made, the answer held back
	type answer struct {
		r   response
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := h.tryConfirm(30*time.Second, tok, "upgrade", "scale", p.ConfirmToken)
		done <- answer{r, err}
	}()
	h.eventually(10*time.Second, "the change reached Stripe", func() bool {
		return h.fake.UpdateCount(acct.Subscription.StripeSubscriptionID) > 0
	})
	// The second call holds its transaction open while Stripe answers.
	var killed int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no transaction open while Stripe answered")
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	wantStatus(t, got.r, http.StatusServiceUnavailable, "upstream_unavailable")
	if body := string(got.r.Body); strings.Contains(body, "nothing was changed") || !strings.Contains(body, "finding out") {
		t.Fatalf("answer %s after Stripe made the change, want outcome unknown", body)
	}
	retry := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	if retry.Status == http.StatusServiceUnavailable {
		time.Sleep(time.Second) // a pooled connection killed idle may fail its first use
		retry = h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	}
	wantStatus(t, retry, http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

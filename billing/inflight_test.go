package billing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// Issue 27's review findings 1, 3, 4 and 6; each test failed before its fix.

// commitFails is a store whose next transaction fails at its COMMIT, after
// its function succeeded: a restart, a failover or a terminated backend
// between the provider's answer and the commit. Work committed earlier in
// the transaction (a recovery point) stays.
type commitFails struct {
	*billingtest.Store
	fail bool
}

func (s *commitFails) InTx(ctx context.Context, fn func(billing.Tx) error) error {
	return s.Store.InTx(ctx, func(tx billing.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if s.fail {
			s.fail = false
			return fmt.Errorf("commit: terminating connection secret-detail-7: %w", billing.ErrUnavailable)
		}
		return nil
	})
}

// TestCommitFailureAfterTheRecoveryPointIsOutcomeUnknown: the change was
// made at the provider and the COMMIT that records it failed. The answer is
// that the outcome is not yet known (the settler records it), never
// "nothing was changed".
func TestCommitFailureAfterTheRecoveryPointIsOutcomeUnknown(t *testing.T) {
	f := newHandshakeFixture(t)
	store := &commitFails{Store: f.store}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: f.provider,
		Catalog: testCatalog(t, billing.DefaultPlans()), TokenTTL: time.Minute, Livemode: true})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	store.fail = true
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	wantPublicMessageClean(t, err, "secret-detail-7")
	if msg := billing.PublicMessage(err); strings.Contains(msg, "nothing was changed") ||
		!strings.Contains(msg, "finding out whether it was made") {
		t.Errorf("answer %q after the change was sent, want outcome unknown", msg)
	}
	if f.provider.Changes() != 1 {
		t.Fatalf("%d changes at the provider", f.provider.Changes())
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Errorf("status %s, want executing (the settler records it)", c.Status)
	}
	f.store.Advance(time.Second)
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted || f.provider.Changes() != 1 {
		t.Errorf("settled as %s with %d changes, want executed with one", c.Status, f.provider.Changes())
	}
}

package billing

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestTransientErrorDuringPolicyRecheck: the database fails while the
// policy is decided again at execution. The transaction rolls back, the
// client is told to retry, and the token is as it was (before: it was marked
// invalidated, with no audit event, while the client was told to retry).
func TestTransientErrorDuringPolicyRecheck(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	setPolicy(f, Policy{DailyLimit: 5})
	f.store.countErr = fmt.Errorf("read: %w", ErrUnavailable)
	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)
	if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusPending {
		t.Fatalf("status = %s after a transient error, want pending", c.Status)
	}
	if n := len(f.provider.applyCalls()); n != 0 {
		t.Fatalf("%d provider calls", n)
	}
	f.store.countErr = nil
	_, err = f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
}

// TestPolicyDeniesAtExecution: a denial at execution is recorded in the
// transaction, as a TOKEN_REVOKED / OPERATION_DENIED pair.
func TestPolicyDeniesAtExecution(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	setPolicy(f, Policy{Rules: []PolicyRule{{Name: "no scale", ToPlans: []string{"scale"}, Action: ActionDeny}}})
	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeOperationDenied)
	st := f.store.snapshot()
	if got := eventsOf(st); !slices.Equal(got[len(got)-2:], []string{EventTokenRevoked, EventOperationDenied}) {
		t.Fatalf("audit %v", got)
	}
	if c := st.confirmations[p.ConfirmationID]; c.Status != StatusInvalidated {
		t.Fatalf("status %s", c.Status)
	}
}

// TestSettleReplayed5xx: the first attempt answered 500 and the key replays
// it. Read back, not applied: the change is sent once under the next key.
func TestSettleReplayed5xx(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", ErrUnavailable, ErrProviderFailed)
	f.provider.applyErrs = []error{fivexx, fivexx}
	f.provider.readState = ProviderSubscription{PriceID: "price_billingd_pro", ConfirmationID: "cfm_earlier"}

	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)
	res, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription.Plan != "scale" {
		t.Fatalf("result %+v", res)
	}
	calls := f.provider.applyCalls()
	keys := []string{}
	for _, c := range calls {
		keys = append(keys, c.key)
	}
	want := []string{"billingd-" + p.ConfirmationID, "billingd-" + p.ConfirmationID, "billingd-" + p.ConfirmationID + "-1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("idempotency keys %v, want %v", keys, want)
	}
	if f.provider.changes != 1 {
		t.Fatalf("%d changes", f.provider.changes)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusExecuted || c.Attempt != 1 {
		t.Fatalf("confirmation %s attempt %d", c.Status, c.Attempt)
	}
}

// TestSettleReadBackShowsApplied: the read-back shows the subscription on the
// new price with this confirmation in its metadata: executed, no new request.
func TestSettleReadBackShowsApplied(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", ErrUnavailable, ErrProviderFailed)
	f.provider.applyErrs = []error{fivexx, fivexx}
	f.provider.readState = ProviderSubscription{PriceID: "price_billingd_scale", ConfirmationID: p.ConfirmationID, Status: "active", ItemID: "si_1"}
	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)
	f.store.advance(time.Second)
	n, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10)
	if err != nil || n != 1 {
		t.Fatalf("settled %d: %v", n, err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != StatusExecuted || c.Attempt != 0 {
		t.Fatalf("confirmation %s attempt %d", c.Status, c.Attempt)
	}
	if got := len(f.provider.applyCalls()); got != 2 {
		t.Fatalf("%d provider requests, want the first and its replay", got)
	}
	res, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.Replayed {
		t.Fatalf("retry after settling: %+v", res)
	}
}

// TestUnsettledBlocksOtherChanges: while one confirmation's outcome is
// unknown, no other change of the subscription is proposed or executed.
func TestUnsettledBlocksOtherChanges(t *testing.T) {
	f := newHandshakeFixture(t)
	bob := alice
	bob.Principal = "bob"
	pb := f.propose(t, bob, OpDowngrade, "free")
	p := f.propose(t, alice, OpUpgrade, "scale")
	f.provider.applyErrs = []error{fmt.Errorf("timeout: %w", ErrUnavailable)}
	_, err := f.confirm(alice, OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)

	_, err = f.svc.ChangePlan(context.Background(), bob, ChangeRequest{Operation: OpDowngrade, To: "free"})
	wantCode(t, err, CodeUpstreamUnavailable)
	_, err = f.confirm(bob, OpDowngrade, "free", pb.ConfirmToken)
	wantCode(t, err, CodeUpstreamUnavailable)
	if c := f.confirmation(t, pb.ConfirmationID); c.Status != StatusPending {
		t.Fatalf("bob's token %s while another change was unsettled", c.Status)
	}
	if n := len(f.provider.applyCalls()); n != 1 {
		t.Fatalf("%d provider requests", n)
	}
}

func setPolicy(f handshakeFixture, p Policy) {
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	a := f.store.state.accounts["org_vb"]
	a.Policy = p
	f.store.state.accounts["org_vb"] = a
}

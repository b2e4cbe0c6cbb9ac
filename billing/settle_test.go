package billing_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// TestTransientErrorDuringPolicyRecheck: the database fails while the
// policy is decided again at execution. The transaction rolls back, the
// client is told to retry, and the token is as it was (before: it was marked
// invalidated, with no audit event, while the client was told to retry).
func TestTransientErrorDuringPolicyRecheck(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	setPolicy(f, billing.Policy{DailyLimit: 5})
	f.store.CountErr = fmt.Errorf("read: %w", billing.ErrUnavailable)
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusPending {
		t.Fatalf("status = %s after a transient error, want pending", c.Status)
	}
	if n := len(f.provider.ApplyCalls()); n != 0 {
		t.Fatalf("%d provider calls", n)
	}
	f.store.CountErr = nil
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
}

// TestPolicyDeniesAtExecution: a denial at execution is recorded in the
// transaction, as a TOKEN_REVOKED / OPERATION_DENIED pair.
func TestPolicyDeniesAtExecution(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	setPolicy(f, billing.Policy{Rules: []billing.PolicyRule{{Name: "no scale", ToPlans: []string{"scale"}, Action: billing.ActionDeny}}})
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeOperationDenied)
	st := f.store.Snapshot()
	if got := eventsOf(st); !slices.Equal(got[len(got)-2:], []string{billing.EventTokenRevoked, billing.EventOperationDenied}) {
		t.Fatalf("audit %v", got)
	}
	if c := st.Confirmations[p.ConfirmationID]; c.Status != billing.StatusInvalidated {
		t.Fatalf("status %s", c.Status)
	}
}

// TestSettleReplayed5xx: the first attempt answered 500 and the key replays
// it. Read back, not applied: the change is sent once under the next key.
func TestSettleReplayed5xx(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)
	f.provider.ApplyErrs = []error{fivexx, fivexx}
	f.provider.ReadState.ConfirmationID = "cfm_earlier" // an earlier change's

	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription.Plan != "scale" {
		t.Fatalf("result %+v", res)
	}
	calls := f.provider.ApplyCalls()
	keys := []string{}
	for _, c := range calls {
		keys = append(keys, c.Key)
	}
	want := []string{"billingd-" + p.ConfirmationID, "billingd-" + p.ConfirmationID, "billingd-" + p.ConfirmationID + "-1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("idempotency keys %v, want %v", keys, want)
	}
	if f.provider.Changes() != 1 {
		t.Fatalf("%d changes", f.provider.Changes())
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted || c.Attempt != 1 {
		t.Fatalf("confirmation %s attempt %d", c.Status, c.Attempt)
	}
}

// TestSettleReadBackShowsApplied: the read-back shows the subscription on the
// new price with this confirmation in its metadata: executed, no new request.
func TestSettleReadBackShowsApplied(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)
	f.provider.ApplyErrs = []error{fivexx, fivexx}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	// The first request was applied after all; its answer was lost.
	f.provider.ReadState.PriceID, f.provider.ReadState.ConfirmationID = "price_billingd_scale", p.ConfirmationID
	f.store.Advance(time.Second)
	n, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10)
	if err != nil || n != 1 {
		t.Fatalf("settled %d: %v", n, err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted || c.Attempt != 0 {
		t.Fatalf("confirmation %s attempt %d", c.Status, c.Attempt)
	}
	if got := len(f.provider.ApplyCalls()); got != 1 {
		t.Fatalf("%d provider requests, want the first alone: the read-back shows it applied", got)
	}
	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
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
	pb := f.propose(t, bob, billing.OpDowngrade, "free")
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	f.provider.ApplyErrs = []error{fmt.Errorf("timeout: %w", billing.ErrUnavailable)}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)

	_, err = f.svc.ChangePlan(context.Background(), bob, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "free"})
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	_, err = f.confirm(bob, billing.OpDowngrade, "free", pb.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if c := f.confirmation(t, pb.ConfirmationID); c.Status != billing.StatusPending {
		t.Fatalf("bob's token %s while another change was unsettled", c.Status)
	}
	if n := len(f.provider.ApplyCalls()); n != 1 {
		t.Fatalf("%d provider requests", n)
	}
}

func setPolicy(f handshakeFixture, p billing.Policy) {
	f.store.Update(func(st *billingtest.State) {
		a := st.Accounts["org_vb"]
		a.Policy = p
		st.Accounts["org_vb"] = a
	})
}

// TestSettleResendRefusedIsNotAFailure: the resend under the same key is
// refused by Stripe itself (an idempotency_error, a key it no longer knows)
// or the read-back fails. Neither says anything about the first request:
// the read-back decides, and an unreadable subscription stays unsettled
// rather than being recorded as failed.
func TestSettleResendRefusedIsNotAFailure(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	timeout := fmt.Errorf("timeout: %w", billing.ErrUnavailable)
	refused := fmt.Errorf("stripe 400 idempotency_error: %w", billing.ErrProviderRejected)
	f.provider.ApplyErrs = []error{timeout, refused, refused}
	f.provider.ReadErrs = []error{nil} // the check before the change reads it; then it cannot be read
	f.provider.ReadErr = fmt.Errorf("stripe 404: %w", billing.ErrProviderRejected)
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)

	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Fatalf("an unreadable outcome was recorded as %s", c.Status)
	}
	f.provider.ReadErr = nil
	f.provider.ReadState.PriceID, f.provider.ReadState.ConfirmationID = "price_billingd_scale", p.ConfirmationID
	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || f.provider.Changes() != 0 {
		t.Fatalf("result %+v after %d new changes, want executed by read-back alone", res, f.provider.Changes())
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted || c.Attempt != 0 {
		t.Fatalf("confirmation %s attempt %d", c.Status, c.Attempt)
	}
}

// TestNoTokenAdviceToATokenlessCaller: a caller that never held the token
// (an allow execution, an MCP elicitation redeeming it for the agent) is not
// told to retry "with the same token" when Stripe's answer is lost; the
// token's holder is.
func TestNoTokenAdviceToATokenlessCaller(t *testing.T) {
	for _, withheld := range []bool{false, true} {
		f := newHandshakeFixture(t)
		p := f.propose(t, alice, billing.OpUpgrade, "scale")
		f.provider.ApplyErrs = []error{fmt.Errorf("timeout: %w", billing.ErrUnavailable)}
		_, err := f.svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale",
			ConfirmToken: p.ConfirmToken, TokenWithheld: withheld})
		wantCode(t, err, billing.CodeUpstreamUnavailable)
		if advises := strings.Contains(err.Error(), "same token"); advises == withheld {
			t.Errorf("token withheld %t: %v", withheld, err)
		}
	}
}

// TestSettleNeverResendsOverAChangeAtTheProvider: Stripe saved a 500 for
// the first request, and the subscription was then changed in Stripe's
// dashboard. The change is not sent again: once the first request is
// certainly over it is recorded as not made, and billingd's copy of the
// subscription becomes Stripe's.
func TestSettleNeverResendsOverAChangeAtTheProvider(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)
	f.provider.ApplyErrs = []error{fivexx}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	f.provider.ReadState.PriceID = "price_billingd_free" // changed in the dashboard

	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable) // the first request may still be under way
	f.store.Advance(5 * time.Minute)                  // past any request of that attempt
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
	if n := len(f.provider.ApplyCalls()); n != 1 {
		t.Fatalf("%d provider requests, want the first alone", n)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusFailed || c.Failure != "not_applied" {
		t.Fatalf("confirmation %s (%s)", c.Status, c.Failure)
	}
	if sub := f.subscription(); sub.Plan != "free" {
		t.Fatalf("billingd's copy is on %s; Stripe's on free", sub.Plan)
	}
}

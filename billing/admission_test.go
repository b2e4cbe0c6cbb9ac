package billing_test

import (
	"context"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// heldProvider holds every plan change until release is closed.
type heldProvider struct {
	*billingtest.Provider
	entered chan struct{}
	release chan struct{}
}

func (p heldProvider) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	p.entered <- struct{}{}
	<-p.release
	return p.Provider.ApplyPlanChange(ctx, change, key)
}

// TestExecutionsBeyondTheLimitAreTurnedAway: with MaxExecutions 1 and one
// execution waiting for the provider, a second call is answered at once
// with upstream_unavailable and a Retry-After, without waiting (the fake
// store is held by the admitted execution), and nothing is read, recorded
// or sent for it: its confirmation stays pending.
func TestExecutionsBeyondTheLimitAreTurnedAway(t *testing.T) {
	bob := billing.Caller{Org: "org_vb", Principal: "bob", Client: "agent-1", RequestID: "req-2"}
	store := billingtest.NewStore(dbNow, testAccount())
	provider := heldProvider{
		Provider: &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"},
			PeriodEnd: periodEnd, ReadState: billingtest.StateOf(testAccount())},
		entered: make(chan struct{}), release: make(chan struct{}),
	}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, Livemode: true, MaxExecutions: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := handshakeFixture{svc: svc, store: store, provider: provider.Provider}
	pa := f.propose(t, alice, billing.OpUpgrade, "scale")
	pb := f.propose(t, bob, billing.OpUpgrade, "scale")

	done := make(chan error, 1)
	go func() {
		_, err := f.confirm(alice, billing.OpUpgrade, "scale", pa.ConfirmToken)
		done <- err
	}()
	<-provider.entered // alice's execution holds the one slot (and the fake store), waiting for the provider

	_, err = f.confirm(bob, billing.OpUpgrade, "scale", pb.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if billing.RetryAfter(err) <= 0 {
		t.Errorf("no Retry-After in %v", err)
	}

	close(provider.release)
	if err := <-done; err != nil {
		t.Fatalf("the admitted execution: %v", err)
	}
	if n := len(provider.ApplyCalls()); n != 1 {
		t.Errorf("%d plan changes sent, want only the admitted one", n)
	}
	if c := f.confirmation(t, pb.ConfirmationID); c.Status != billing.StatusPending {
		t.Errorf("turned-away confirmation is %s, want pending", c.Status)
	}
	for _, ev := range store.Snapshot().Audit {
		if ev.Event != billing.EventTokenIssued && (ev.ConfirmationID == pb.ConfirmationID || ev.Principal == "bob") {
			t.Errorf("event %s recorded for the call turned away", ev.Event)
		}
	}
}

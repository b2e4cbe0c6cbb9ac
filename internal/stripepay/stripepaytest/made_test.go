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

// TestWritesAreLoggedWithTheirStates: the log the sweep's oracle judges
// from holds every write that executed — billingd's, the dashboard's — with
// the subscription's state around it, the invoice it made and whether its
// answer reached the client; a refused write and a replay are not in it.
func TestWritesAreLoggedWithTheirStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	sub := e.org.SubscriptionID
	e.fake.FailNext(stripepaytest.DeclineCard)
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "k_declined"); err == nil {
		t.Fatal("a declined update succeeded")
	}
	e.fake.FailNext(stripepaytest.LoseResponse)
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "k_lost"); !errors.Is(err, billing.ErrProviderFailed) {
		t.Fatalf("lost answer: %v", err)
	}
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "k_lost"); err != nil { // a replay
		t.Fatal(err)
	}
	if err := e.fake.ChangeInDashboard(sub, func(s *stripepaytest.Subscription) { s.Items[0].PriceID = priceFree }); err != nil {
		t.Fatal(err)
	}
	writes := e.fake.WritesFor(sub)
	if len(writes) != 2 {
		t.Fatalf("%d writes logged, want the update and the dashboard's: %+v", len(writes), writes)
	}
	update, dashboard := writes[0], writes[1]
	if update.Endpoint != stripepaytest.UpdateSubscription || update.Key != "k_lost" || update.Answered || !update.Replied.IsZero() ||
		update.Before.PriceID != pricePro || update.After.PriceID != priceScale || update.Invoice == "" || !update.Changed() {
		t.Fatalf("update logged as %+v", update)
	}
	if dashboard.Endpoint != stripepaytest.Dashboard || dashboard.Before.PriceID != priceScale ||
		dashboard.After.PriceID != priceFree || dashboard.Invoice != "" || dashboard.At.Before(update.At) {
		t.Fatalf("dashboard change logged as %+v", dashboard)
	}
	if _, err := e.p.ReadSubscription(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	if reads := e.fake.ReadsOf(sub); len(reads) != 1 || reads[0].Before(dashboard.At) {
		t.Fatalf("reads %v, want the one after the dashboard's change", reads)
	}
}

// TestStalledWriteArrivesBeforeItExecutes: a lingering request is logged as
// arriving when it came and executing when it did, so that the oracle sees
// a request still running at Stripe while billingd read back.
func TestStalledWriteArrivesBeforeItExecutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.FailNext(stripepaytest.Linger(200 * time.Millisecond))
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "k_stall"); err != nil {
		t.Fatal(err)
	}
	writes := e.fake.WritesFor(e.org.SubscriptionID)
	if len(writes) != 1 || writes[0].At.Sub(writes[0].Arrived) < 200*time.Millisecond || !writes[0].Answered ||
		writes[0].Replied.Before(writes[0].At) {
		t.Fatalf("stalled write logged as %+v", writes)
	}
}

// TestWriteHeldPastTheClientsTimeoutIsNotAnswered: a client that gave up
// on a held answer never got it, and the log says so (no Replied time),
// whether the fake stopped holding when the client went (Delay) or held
// on (Linger, the sweep's "Stripe stalls"): the oracle's rule 8 tells a
// caller that kept its deadline from one that waited.
func TestWriteHeldPastTheClientsTimeoutIsNotAnswered(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]stripepaytest.Fault{
		"delay":  stripepaytest.Delay(10 * time.Second),
		"linger": stripepaytest.Linger(3 * time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, stripepay.Config{Timeout: time.Second})
			e.fake.FailNext(fault)
			if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "k_held"); !errors.Is(err, billing.ErrUnavailable) {
				t.Fatalf("held answer: %v", err)
			}
			// The fake logs the hang-up once its handler is done (a
			// lingering write executes 3 s after it came).
			eventually(t, "the fake done with the write", func() bool { return e.fake.Running(e.org.SubscriptionID) == 0 })
			if writes := e.fake.WritesFor(e.org.SubscriptionID); len(writes) != 1 || writes[0].Answered || !writes[0].Replied.IsZero() {
				t.Fatalf("held write logged as %+v", writes)
			}
		})
	}
}

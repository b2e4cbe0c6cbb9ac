package stripepaytest_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestStateRestore: a new fake restored from another's State, even through
// JSON as billingd dev keeps it, knows its subscriptions, changes them and
// hands out fresh ids.
func TestStateRestore(t *testing.T) {
	e := newEnv(t, stripepay.Config{})
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "key-1"); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(e.fake.State())
	if err != nil {
		t.Fatal(err)
	}
	var st stripepaytest.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}

	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return start })
	fake.SetPrice(pricePro, 1900, "usd")
	fake.SetPrice(priceScale, 4900, "usd")
	fake.Restore(st)
	sub, ok := fake.Subscription(e.org.SubscriptionID)
	if !ok || sub.Items[0].PriceID != priceScale || fake.UpdateCount(sub.ID) != 1 || !sub.CurrentPeriodStart.Equal(start) {
		t.Fatalf("restored subscription: %+v, %v, %d updates", sub, ok, fake.UpdateCount(sub.ID))
	}
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	p := stripepay.New(stripepay.Config{SecretKey: "sk_test_fake", APIBase: srv.URL})
	if _, err := p.ApplyPlanChange(context.Background(), e.change(pricePro), "key-2"); err != nil {
		t.Fatalf("change a restored subscription: %v", err)
	}
	if got := fake.UpdateCount(sub.ID); got != 2 {
		t.Errorf("UpdateCount = %d, want 2", got)
	}
	org, err := p.CreateCustomer(context.Background(), billing.NewCustomer{OrgID: "org_2", Name: "B", PriceID: pricePro}, "org_2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Customers {
		if c.ID == org.CustomerID {
			t.Errorf("new customer reuses id %s", c.ID)
		}
	}
}

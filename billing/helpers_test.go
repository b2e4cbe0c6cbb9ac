package billing

import (
	"testing"
	"time"
)

// What the internal tests (the rules, the catalog) share. The handshake's
// tests live in the external package billing_test, with billingtest's fakes;
// its fixture (service_test.go) makes the same account.

var periodEnd = time.Date(2026, 5, 30, 0, 0, 0, 0, time.UTC)

func testAccount() Account {
	return Account{
		Org: Org{ID: "org_vb", Name: "Vector Build", StripeCustomerID: "cus_1"},
		Subscription: Subscription{Org: "org_vb", StripeSubscriptionID: "sub_1", StripeItemID: "si_1",
			Plan: "pro", Status: "active", CurrentPeriodEnd: periodEnd, Version: 1},
	}
}

func testCatalog(t *testing.T, plans []Plan) Catalog {
	t.Helper()
	c, err := NewCatalog(plans)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
}

func wantCode(t *testing.T, err error, want Code) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("err = %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("err = nil, want %s", want)
	}
	if got := ErrorCode(err); got != want {
		t.Fatalf("ErrorCode = %s, want %s (err: %v)", got, want, err)
	}
}

// unusedStore and unusedProvider satisfy NewService for tests of rules that
// never reach the store or the provider: any call panics on the nil
// interface, which would show the rule did.
type (
	unusedStore    struct{ Store }
	unusedProvider struct{ PaymentProvider }
)

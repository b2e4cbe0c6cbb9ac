package billing_test

import (
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// TestMemStoreContract runs the store contract on the in-memory fake the
// handshake's unit tests use; internal/postgres runs the same suite on
// PostgreSQL, so the fake cannot drift from the real store.
func TestMemStoreContract(t *testing.T) {
	billingtest.RunStoreContract(t, func(*testing.T) billing.Store {
		return billing.NewMemStore(time.Date(2026, 5, 12, 10, 0, 0, 0, time.UTC))
	})
}

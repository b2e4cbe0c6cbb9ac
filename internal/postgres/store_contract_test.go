package postgres_test

import (
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
)

// TestStoreContract runs the store contract billing's in-memory fake also
// runs, on a real, migrated PostgreSQL database per case.
func TestStoreContract(t *testing.T) {
	billingtest.RunStoreContract(t, func(t *testing.T) billing.Store {
		return postgres.NewStore(testenv.NewDatabase(t).Pool)
	})
}

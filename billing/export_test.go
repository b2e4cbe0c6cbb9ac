package billing

import "time"

// NewMemStore exposes the in-memory fake store to the external test package
// (store_contract_test.go), which runs billingtest's contract suite on it.
func NewMemStore(now time.Time) Store { return newMemStore(now) }

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
)

var _ billing.ExecutionStore = (*Store)(nil)

// WithExecutions returns a store like s whose transactions that span a
// provider request (the second call's) take connections from executions,
// a pool of their own as large as the executions billing admits at once
// (CONFIRM_CONCURRENCY): such a transaction holds its connection while
// Stripe answers, and with a pool of its own it never takes one a first
// call needs, nor waits for one.
func (s *Store) WithExecutions(executions *pgxpool.Pool) *Store {
	c := *s
	c.executions = executions
	return &c
}

// InExecutionTx implements billing.ExecutionStore: InTx on the executions
// pool.
func (s *Store) InExecutionTx(ctx context.Context, fn func(billing.Tx) error) error {
	return s.inTx(ctx, s.executions, fn)
}

package billing

import (
	"context"
	"time"

	"golang.org/x/sync/semaphore"
)

// Executions and load.
//
// A second call holds a database connection, and its row locks, for as
// long as the provider takes to change the subscription: at Stripe's pace
// ~300 ms, seconds in the tail. A first call holds nothing while the
// provider previews (its two short exchanges with the database come before
// and after). So that first calls never wait for connections that second
// calls hold, executions are a bulkhead of their own:
//
//   - at most Config.MaxExecutions run at once in a Service (a replica);
//     one more is answered at once, before anything is read or locked,
//     with upstream_unavailable and Retry-After, its token untouched and
//     still redeemable. Nothing queues: a queue of executions would hold
//     the callers' requests open without bound while the provider is slow.
//   - their transactions run on connections of their own when the store
//     has them (ExecutionStore: PostgreSQL's executions pool, as large as
//     MaxExecutions), so an admitted execution never waits for a connection
//     either, and first calls keep every connection of the main pool.

// ExecutionStore is a Store whose transactions that span a provider request
// (the second call's) run on connections set apart for them.
type ExecutionStore interface {
	// InExecutionTx is InTx on the connections set apart for executions.
	InExecutionTx(ctx context.Context, fn func(Tx) error) error
}

// DefaultMaxExecutions is Config.MaxExecutions' default (CONFIRM_CONCURRENCY):
// at ~300 ms a change, 32 at once is ~100 changes a second, Stripe's
// documented write limit for one account in live mode.
const DefaultMaxExecutions = 32

// executionRetryAfter is what a caller turned away for load is told to
// wait: about one provider request, whole seconds being the header's unit.
const executionRetryAfter = time.Second

// admission is the bulkhead: a slot per running execution.
type admission struct{ slots *semaphore.Weighted }

func newAdmission(n int) admission {
	return admission{slots: semaphore.NewWeighted(int64(n))}
}

// confirmAdmitted is the second call (or an execution a policy allows at
// once) behind the bulkhead: admitted, or refused at once for load.
func (s *Service) confirmAdmitted(ctx context.Context, caller Caller, req ChangeRequest) (ChangeResult, error) {
	if !s.admission.slots.TryAcquire(1) {
		return ChangeResult{}, errBusy(req.TokenWithheld)
	}
	defer s.admission.slots.Release(1)
	return s.confirm(ctx, caller, req)
}

// admittedExecutionTx is a transaction on s.executions behind the bulkhead, for the other
// steps that hold their locks while the provider answers (settling, a
// webhook's read of the subscription): they share the second calls' slots
// and connections, and never take the main pool's. busy: every slot was
// taken and fn did not run.
func (s *Service) admittedExecutionTx(ctx context.Context, fn func(Tx) error) (busy bool, err error) {
	if !s.admission.slots.TryAcquire(1) {
		return true, nil
	}
	defer s.admission.slots.Release(1)
	return false, s.executions.InTx(ctx, fn)
}

// transactor runs transactions: a Store, or its connections for executions.
type transactor interface {
	InTx(ctx context.Context, fn func(Tx) error) error
}

// executionsOf is where store runs a step that calls the provider: on its
// connections for executions, if it has them.
func executionsOf(store Store) transactor {
	if es, ok := store.(ExecutionStore); ok {
		return executionTxs{es}
	}
	return store
}

// executionTxs is an ExecutionStore's executions pool as a transactor.
type executionTxs struct{ ExecutionStore }

func (e executionTxs) InTx(ctx context.Context, fn func(Tx) error) error {
	return e.InExecutionTx(ctx, fn)
}

// errBusy: every execution slot of this replica is taken. Nothing was read
// or changed; the token is as it was. withheld: the caller holds no token
// (a change its policy allows at once), so the answer does not mention one.
func errBusy(withheld bool) *Error {
	msg := "billingd is executing as many changes as it can while the payment provider answers; " +
		"nothing was changed and the token is still valid: retry the same call shortly"
	if withheld {
		msg = "billingd is executing as many changes as it can while the payment provider answers; " +
			"nothing was changed: retry the same call shortly"
	}
	return &Error{Code: CodeUpstreamUnavailable, RetryAfter: executionRetryAfter, Message: msg}
}

package billing

import (
	"context"
	"time"
)

// Store keeps orgs, subscriptions, confirmations and the audit log. Times it
// returns come from the database clock, which is the handshake's only clock:
// several billingd replicas share one database, and no replica's wall clock
// decides whether a token has expired. Lookups of rows that do not exist
// return ErrNotFound; failures to reach the database wrap ErrUnavailable.
type Store interface {
	// Account reads an org with its subscription, and the database's now.
	Account(ctx context.Context, org string) (Account, time.Time, error)

	// AccountForCall is Account for a first call: with it, in the same
	// round trip, the principal's activity over the last window (none
	// when window is 0), by the audit log: its issued tokens and refused
	// first calls (OPERATION_DENIED without a confirmation), and its
	// rejected second calls. Activity.Now is the database's now either way.
	AccountForCall(ctx context.Context, org, principal string, window time.Duration) (Account, Activity, error)

	// IssueConfirmation stores c (status pending, expiring ttl from the
	// database's now) and, in the same statement, supersedes every pending
	// confirmation of the same org, principal and operation. It writes the
	// audit events: TOKEN_ISSUED for c and TOKEN_REVOKED (reason superseded)
	// for each superseded confirmation, both made from the template event.
	// It returns c with CreatedAt and ExpiresAt set. It writes nothing and
	// returns ErrConflict if, when it runs, a confirmation of the org is
	// executing or the subscription's version is no longer
	// c.Terms.SubscriptionVer: the quote may be of a state a change in
	// flight has replaced. It never waits for a step that holds the
	// subscription (a second call at Stripe): that is ErrConflict too.
	IssueConfirmation(ctx context.Context, c Confirmation, ttl time.Duration, template AuditEvent) (Confirmation, error)

	// InTx runs fn in one transaction: committed if fn returns nil, rolled
	// back otherwise. Once fn returned nil the commit no longer depends on
	// ctx: a step that called the provider must be recorded even when the
	// client has gone.
	InTx(ctx context.Context, fn func(Tx) error) error

	// PendingConfirmations lists the org's pending, unexpired confirmations,
	// newest first; only principal's when principal is not empty.
	PendingConfirmations(ctx context.Context, org, principal string) ([]Confirmation, error)

	// AuditEvents lists the org's events newest first, with ids below before
	// (0: from the newest).
	AuditEvents(ctx context.Context, org string, limit int, before int64) ([]AuditEvent, error)

	// AppendAudit writes events outside any transaction: for refusals that
	// need no lock and outcomes whose transaction was rolled back.
	AppendAudit(ctx context.Context, events ...AuditEvent) error

	changeCounter

	// CreateAccount stores a new org with its subscription.
	CreateAccount(ctx context.Context, a Account) error
}

// changeCounter counts an org's executed changes. The store (on the pool)
// and a Tx (on its own connection) both have it, so a step that holds row
// locks counts through its transaction and never waits for a second
// connection.
type changeCounter interface {
	// ExecutedSince counts the org's executed plan changes in the last
	// window, by the audit log.
	ExecutedSince(ctx context.Context, org string, window time.Duration) (int, error)
}

// Tx is everything a step of the handshake reads and writes inside one
// transaction. A step that holds a lock uses only its Tx: reaching for the
// store there would ask the pool for a second connection while holding the
// first, and a pool smaller than the number of concurrent calls would lock
// up.
type Tx interface {
	// LockByToken locks the confirmation with the given token hash, if it
	// belongs to org and principal, together with the org's subscription
	// (the subscription first: the one lock order of every step), and
	// returns them with the database's now. A token of anyone else is
	// ErrNotFound: nothing about it is revealed and it stays valid.
	// Account.Unsettled tells whether another confirmation of the org is
	// executing, as seen once the locks are held.
	LockByToken(ctx context.Context, org, principal string, tokenHash []byte) (Confirmation, Account, time.Time, error)

	// ReadActivity reads the principal's activity over window (as
	// AccountForCall counts it) into
	// into, as part of the step's next exchange: into is filled once the
	// next call of the Tx returns without error. A second call reads its
	// rate limit this way, in the same round trip as its lock.
	ReadActivity(org, principal string, window time.Duration, into *Activity)

	// LockUnsettled locks one executing confirmation whose last attempt is
	// older than idle, with its org's subscription, skipping rows other
	// transactions hold; ErrNotFound when there is none.
	// Those in skip are passed over (a settler's round does not come back
	// to one it could not settle yet).
	LockUnsettled(ctx context.Context, idle time.Duration, skip []string) (Confirmation, Account, time.Time, error)

	changeCounter

	// LockOwedRestore locks one confirmation that owes back a scheduled
	// change (Restore.Owed), with its org's subscription, the longest owed
	// first, skipping rows other transactions hold and those in skip;
	// ErrNotFound when there is none.
	LockOwedRestore(ctx context.Context, skip []string) (Confirmation, Account, time.Time, error)

	// LockLapsedApproval locks one pending confirmation still waiting for
	// approvals whose expires_at passed more than skew ago (the longest
	// lapsed first), skipping rows other transactions hold and those in
	// skip; ErrNotFound when there is none. It locks no subscription.
	LockLapsedApproval(ctx context.Context, skew time.Duration, skip []string) (Confirmation, time.Time, error)

	// LockByID locks the org's confirmation with the given id.
	LockByID(ctx context.Context, org, id string) (Confirmation, time.Time, error)

	// LockSubscription locks the subscription with the given provider id,
	// with its org.
	LockSubscription(ctx context.Context, stripeSubscriptionID string) (Account, error)

	// LockDueScheduled locks one subscription, with its org, whose
	// cancellation at the period's end is due (its period ended more than
	// grace ago, and billingd's copy still shows it active), or whose
	// scheduled change was due more than grace ago, skipping rows other
	// transactions hold and those whose provider subscription id is in
	// skip; ErrNotFound when there is none.
	LockDueScheduled(ctx context.Context, grace time.Duration, skip []string) (Account, error)

	// LockPending locks the org's pending confirmations.
	LockPending(ctx context.Context, org string) ([]Confirmation, error)

	// SavePolicy replaces the org's policy. It takes no lock a change
	// holds while the provider answers (an admin never waits for Stripe):
	// a change decides the policy once more right before its request
	// leaves (confirm.go, policyAgainBeforeSend).
	SavePolicy(ctx context.Context, org string, p Policy, by string) error

	// MarkEventProcessed records a provider event id; false if it was
	// recorded before.
	MarkEventProcessed(ctx context.Context, eventID string) (bool, error)

	// Record writes the outcome of a step: a new confirmation status, a new
	// subscription and audit events, each optional. A store may send the
	// writes with the transaction's next statement or its commit, in order;
	// an error of theirs then fails that later call, and the transaction.
	Record(ctx context.Context, r Record) error

	// SaveRecoveryPoint is the step that must come before every provider
	// request that may change a subscription. It marks the confirmation
	// executing under attempt (attempted_at now, sent_at too if unset) and
	// COMMITS the transaction with everything recorded so far, so that a
	// crash at any later instant leaves a row from which any replica's
	// settler finishes the attempt with the same idempotency key. It then
	// opens a new transaction and locks the subscription and the
	// confirmation again, in the one lock order (subscription first), and
	// returns them as they are now with the database's now. An error after
	// the commit wraps ErrRecoveryPointSaved. consent, when set, is how the
	// person agreed, recorded in the same write (consent.go).
	SaveRecoveryPoint(ctx context.Context, confirmationID string, attempt int, consent *Consent) (Confirmation, Account, time.Time, error)
}

// Record is what one step of the handshake changes.
type Record struct {
	ConfirmationID string
	Status         Status        // "" leaves the status alone
	Subscription   *Subscription // nil leaves the subscription alone; Version is bumped
	// Approval records an approver's decision.
	Approval *ApprovalDecision
	// Verification records the requester's fresh authentication.
	Verification *Verification
	// RequireVerification puts the confirmation under the verify level.
	RequireVerification bool
	// SyncedSubscription only records SyncedAt: the provider confirmed the
	// subscription as billingd has it.
	SyncedSubscription *Subscription
	// Attempt, when set with Status, records the number of the provider
	// request that led to the status (and when it was made).
	Attempt *int
	// Agent: the confirmation was redeemed by an agent, and is an agent's
	// from now on (a resend is judged as an agent's change).
	Agent bool
	// Failure, set with Status failed, is why the change was not made.
	Failure string
	// Restore, when set, is what is now owed of putting back the scheduled
	// change the confirmation's first step released (restore.go).
	Restore *RestoreDebt
	// Result, set with Status executed, is the answer to replay.
	Result *ChangeResult
	// Receipt is the signed receipt of the change this step executed.
	Receipt *StoredReceipt
	Events  []AuditEvent
}

// ApprovalDecision is an approver's answer, or a change of what the
// approval waits for.
type ApprovalDecision struct {
	State    Approval
	Approver string
	// Auth is the approver's authentication when deciding.
	Auth Authentication
	// Approvers, when not nil, is the new list of people who approved.
	Approvers []string
	// Required, when not 0, is the new number of approvals needed.
	Required int
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
)

// Store implements billing.Store on PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
	// executions serves the transactions that span a provider request
	// (InExecutionTx); pool when none was given.
	executions    *pgxpool.Pool
	commitTimeout time.Duration
}

var _ billing.Store = (*Store)(nil)

// NewStore returns a store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, executions: pool,
		commitTimeout: commitTimeoutFor(pool.Config().ConnConfig.RuntimeParams["lock_timeout"])}
}

// commitTimeoutFor bounds a COMMIT that no longer depends on the client.
// The step's last writes travel with it and may wait for a row lock (the
// audit chain's head) like any statement, up to lock_timeout (which Open
// sets above the Stripe timeout): a write recording a change Stripe made
// must not be cut short before that, while a hung database still ends.
func commitTimeoutFor(lockTimeoutMS string) time.Duration {
	const margin = 10 * time.Second
	ms, err := strconv.ParseInt(lockTimeoutMS, 10, 64)
	if err != nil || ms <= 0 {
		return time.Minute // no lock_timeout of ours: a statement may wait for ever; a minute is generous
	}
	return time.Duration(ms)*time.Millisecond + margin
}

// Ready reports whether the database answers and its schema is the one this
// binary expects.
func (s *Store) Ready(ctx context.Context) error {
	latest, err := LatestVersion()
	if err != nil {
		return err
	}
	var version int64
	var dirty bool
	err = s.pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty)
	if err != nil {
		return fmt.Errorf("read schema version: %w", classify(err))
	}
	if dirty || version != int64(latest) {
		return fmt.Errorf("schema is at version %d (dirty %t), this binary needs %d", version, dirty, latest)
	}
	return nil
}

const accountColumns = `o.id, o.name, o.stripe_customer_id,
	s.stripe_subscription_id, s.stripe_item_id, s.plan, s.status, s.current_period_end, s.version,
	coalesce(s.synced_at, '0001-01-01 00:00:00+00'), p.policy, s.scheduled, s.quantity,
	s.cancel_at_period_end, s.canceled_at` // NULL synced_at as Go's zero time

// accountFrom joins what accountColumns reads; an org without a policy row
// has the empty policy.
const accountFrom = `orgs o JOIN subscriptions s ON s.org = o.id LEFT JOIN org_policies p ON p.org = o.id`

func scanAccount(a *billing.Account) []any {
	return []any{&a.Org.ID, &a.Org.Name, &a.Org.StripeCustomerID,
		&a.Subscription.StripeSubscriptionID, &a.Subscription.StripeItemID, &a.Subscription.Plan,
		&a.Subscription.Status, &a.Subscription.CurrentPeriodEnd, &a.Subscription.Version,
		&a.Subscription.SyncedAt, policyColumn{&a.Policy}, &a.Subscription.Scheduled, &a.Subscription.Quantity,
		&a.Subscription.CancelAtPeriodEnd, optionalTime{&a.Subscription.CanceledAt}}
}

// policyColumn scans a policy stored as JSON; NULL is the empty policy.
type policyColumn struct{ p *billing.Policy }

func (pc policyColumn) Scan(src any) error {
	*pc.p = billing.Policy{}
	switch v := src.(type) {
	case nil:
		return nil
	case []byte:
		return json.Unmarshal(v, pc.p)
	case string:
		return json.Unmarshal([]byte(v), pc.p)
	default:
		return fmt.Errorf("policy column: unexpected %T", src)
	}
}

// accountSQL reads an org's account, the clock, whether a change of the
// org is executing and whether principal $2 holds a mandate in force.
const accountSQL = `SELECT ` + accountColumns + `, now(),
			EXISTS (SELECT 1 FROM confirmations x WHERE x.org = o.id AND x.status = 'executing'),
			EXISTS (SELECT 1 FROM mandates m WHERE m.org = o.id AND m.principal = $2
				AND m.revoked_at IS NULL AND m.expires_at > now())
		FROM ` + accountFrom + ` WHERE o.id = $1`

// Account implements billing.Store.
func (s *Store) Account(ctx context.Context, org string) (billing.Account, time.Time, error) {
	a, activity, err := s.AccountForCall(ctx, org, "", 0)
	return a, activity.Now, err
}

// AccountForCall implements billing.Store: with a window, the activity
// count and the account read go in one batch, one round trip.
func (s *Store) AccountForCall(ctx context.Context, org, principal string, window time.Duration) (billing.Account, billing.Activity, error) {
	var a billing.Account
	var activity billing.Activity
	found := false
	batch := &pgx.Batch{}
	if window > 0 {
		queueActivity(batch, org, principal, window, &activity)
	}
	batch.Queue(accountSQL, org, principal).QueryRow(func(row pgx.Row) error {
		err := row.Scan(append(scanAccount(&a), &activity.Now, &a.Unsettled, &a.Mandated)...)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return billing.Account{}, billing.Activity{}, fmt.Errorf("read account: %w", classify(err))
	}
	if !found {
		return billing.Account{}, billing.Activity{}, billing.ErrNotFound
	}
	a.Subscription.Org = a.Org.ID
	return a, activity, nil
}

// issueSQL supersedes the caller's pending confirmation for the operation,
// inserts the new one and writes the audit events, in one statement (one
// round trip, atomic on its own). The sub-statements of a WITH query run in
// no guaranteed order, so the INSERT reads the count of superseded rows:
// that forces the UPDATE to finish first, and the new row never meets the
// old one in the one-pending-per-caller index. Nothing is written unless
// (quotable) no confirmation of the org is executing and the subscription
// is still at the version quoted ($15).
const issueSQL = `
WITH quotable AS (
	SELECT 1 FROM subscriptions WHERE org = $2 AND version = $15
		AND NOT EXISTS (SELECT 1 FROM confirmations WHERE org = $2 AND status = 'executing')
), superseded AS (
	UPDATE confirmations SET status = 'superseded', finished_at = now()
	WHERE org = $2 AND principal = $3 AND operation = $5 AND status = 'pending' AND EXISTS (SELECT 1 FROM quotable)
	RETURNING id
), issued AS (
	INSERT INTO confirmations (id, token_hash, org, principal, client, operation, status,
		from_plan, to_plan, from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency,
		proration_date, subscription_version, amount_due_cents, credit_cents, next_charge_at, summary, expires_at,
		approval, agent, verify_required, livemode,
		subtotal_cents, discount_cents, tax_cents, credit_applied_cents, at_period_end, at_renewal, cancels, from_status,
		approvals_required, quantity, quantity_to,
		cancellation, cancel_reason, cancel_comment, from_cancel_at_period_end)
	SELECT $1, $6, $2, $3, $4, $5, 'pending',
		$7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, now() + $20 * interval '1 microsecond',
		NULLIF($24, ''), $25, $26, $27,
		$28, $29, $30, $31, $32, $33, $34, $35,
		$36, $37, $38,
		$39, $40, $41, $42
	FROM (SELECT count(*) FROM superseded) AS after_supersede, quotable
	RETURNING created_at, expires_at
), audited AS (
	INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id)
	SELECT 'TOKEN_REVOKED', $2, $3, $4, $5, id, 'revoked', 'superseded', $21 FROM superseded
	UNION ALL
	SELECT $22, $2, $3, $4, $5, $1, $23, '', $21 FROM quotable
)
SELECT created_at, expires_at FROM issued`

// firstCallLockWait bounds how long a first call waits for a step that
// holds its subscription (lock_timeout, for that statement alone). A replay
// of an executed token, a refused second call or a webhook without a
// Stripe request hold it for a round trip or two and are waited for; a
// second call at Stripe (its check of the subscription or its update), the
// settler or a webhook reading Stripe hold it for a Stripe request, which a
// first call never waits for (nor holds a pool connection meanwhile): that
// is a conflict, answered with Retry-After. The issue statement's own locks
// (the chain head, superseded rows) are waited for as before.
const firstCallLockWait = "50ms"

// IssueConfirmation implements billing.Store.
func (s *Store) IssueConfirmation(ctx context.Context, c billing.Confirmation, ttl time.Duration, template billing.AuditEvent) (billing.Confirmation, error) {
	t := c.Terms
	c.ApprovalsRequired = max(c.ApprovalsRequired, 1) // the column's default: needs no approval unless approval is set
	args := []any{c.ID, c.Org, c.Principal, c.Client, string(c.Operation), c.TokenHash,
		t.FromPlan, t.ToPlan, t.FromPriceID, t.ToPriceID, t.FromAmountCents, t.ToAmountCents, t.Currency,
		t.ProrationDate, t.SubscriptionVer, t.AmountDueCents, t.CreditCents, t.NextChargeAt, c.Summary,
		ttl.Microseconds(), template.RequestID, template.Event, template.Outcome, string(c.Approval), c.Agent,
		c.VerifyRequired, t.Livemode,
		t.SubtotalCents, t.DiscountCents, t.TaxCents, t.CreditAppliedCents, t.AtPeriodEnd, t.AtRenewal, t.Cancels, t.FromStatus,
		c.ApprovalsRequired, max(t.Quantity, 1), t.ToQuantity,
		string(t.Cancellation), t.CancelReason, t.CancelComment, t.FromCancelAtPeriodEnd}
	// Concurrent first calls of one caller must supersede one another in
	// turn: each takes a transaction-scoped advisory lock on (org, principal,
	// operation) first. Statements of one batch share an implicit transaction
	// but each gets its own snapshot, so the issue statement, run once the
	// lock is held, sees the pending confirmation the previous holder
	// committed. It then takes the subscription FOR SHARE, so that the issue
	// statement's snapshot sees every recovery point committed before, waiting
	// at most firstCallLockWait for a step that holds it (see there). One
	// round trip in all.
	batch := &pgx.Batch{}
	batch.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		c.Org+"/"+c.Principal+"/"+string(c.Operation)) // a collision only serialises more
	batch.Queue(`SELECT set_config('lock_timeout', $1, true)`, firstCallLockWait)
	batch.Queue(`SELECT 1 FROM subscriptions WHERE org = $1 FOR SHARE`, c.Org)
	batch.Queue(`SELECT set_config('lock_timeout', '0', true)`)
	batch.Queue(issueSQL, args...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.CreatedAt, &c.ExpiresAt)
	})
	err := s.pool.SendBatch(ctx, batch).Close()
	if errors.Is(err, pgx.ErrNoRows) || isLockNotAvailable(err) {
		return billing.Confirmation{}, fmt.Errorf("issue confirmation: %w", billing.ErrConflict)
	}
	if err != nil {
		return billing.Confirmation{}, fmt.Errorf("issue confirmation: %w", classify(err))
	}
	return c, nil
}

// InTx implements billing.Store. The transaction is a storeTx on a
// connection of its own, which sends BEGIN with the step's first statement
// and COMMIT with its last writes.
func (s *Store) InTx(ctx context.Context, fn func(billing.Tx) error) error {
	return s.inTx(ctx, s.pool, fn)
}

// inTx is InTx on a connection of pool.
func (s *Store) inTx(ctx context.Context, pool *pgxpool.Pool, fn func(billing.Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", classify(err))
	}
	defer conn.Release() // a connection left inside a transaction is closed, not reused
	tx := &storeTx{conn: conn, endTimeout: s.commitTimeout}
	if err := fn(tx); err != nil {
		tx.rollback(ctx)
		return err
	}
	// fn decided; its outcome (a provider call's included) is committed
	// whether or not the client is still there.
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.commitTimeout)
	defer cancel()
	if err := tx.commit(commitCtx); err != nil {
		tx.rollback(ctx)
		return fmt.Errorf("commit: %w", classify(err))
	}
	return nil
}

const pendingLimit = 200

// PendingConfirmations implements billing.Store.
func (s *Store) PendingConfirmations(ctx context.Context, org, principal string) ([]billing.Confirmation, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, operation, summary, principal, client, status, created_at, expires_at,
			coalesce(approval, ''), coalesce(approver, ''), approvals_required, approvers, `+verificationColumns+`
		FROM confirmations c
		WHERE org = $1 AND status = 'pending' AND expires_at > now() AND ($2 = '' OR principal = $2)
		ORDER BY created_at DESC LIMIT $3`, org, principal, pendingLimit)
	if err != nil {
		return nil, fmt.Errorf("list confirmations: %w", classify(err))
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (billing.Confirmation, error) {
		c := billing.Confirmation{Org: org}
		err := row.Scan(append([]any{&c.ID, &c.Operation, &c.Summary, &c.Principal, &c.Client, &c.Status, &c.CreatedAt, &c.ExpiresAt,
			&c.Approval, &c.Approver, &c.ApprovalsRequired, &c.Approvers}, scanVerification(&c)...)...)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list confirmations: %w", classify(err))
	}
	return cs, nil
}

// AuditEvents implements billing.Store.
func (s *Store) AuditEvents(ctx context.Context, org string, limit int, before int64) ([]billing.AuditEvent, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, event, org, principal, client, operation, confirmation_id, outcome, reason, request_id, consent
		FROM audit_events WHERE org = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, org, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", classify(err))
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[billing.AuditEvent])
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", classify(err))
	}
	return events, nil
}

// AppendAudit implements billing.Store.
func (s *Store) AppendAudit(ctx context.Context, events ...billing.AuditEvent) error {
	batch := &pgx.Batch{}
	queueAudit(batch, events)
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("append audit: %w", classify(err))
	}
	return nil
}

// CreateAccount implements billing.Store.
func (s *Store) CreateAccount(ctx context.Context, a billing.Account) error {
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO orgs (id, name, stripe_customer_id) VALUES ($1, $2, $3)`,
		a.Org.ID, a.Org.Name, a.Org.StripeCustomerID)
	sub := a.Subscription
	batch.Queue(`INSERT INTO subscriptions (org, stripe_subscription_id, stripe_item_id, plan, status, current_period_end, quantity)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		a.Org.ID, sub.StripeSubscriptionID, sub.StripeItemID, sub.Plan, sub.Status, sub.CurrentPeriodEnd, max(sub.Quantity, 1))
	// A batch outside a transaction runs as one implicit transaction.
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("create account: %w", classify(err))
	}
	return nil
}

func queueAudit(batch *pgx.Batch, events []billing.AuditEvent) {
	for _, e := range events {
		batch.Queue(`INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id, consent)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.Event, e.Org, e.Principal, e.Client, e.Operation, e.ConfirmationID, e.Outcome, e.Reason, e.RequestID, e.Consent)
	}
}

// queueActivity queues the count of principal's recent activity into a:
// tokens issued and first calls the policy refused (OPERATION_DENIED
// without a confirmation), and rejected second calls. An agent's refused
// loosening (OPERATION_DENIED, reason person_required: a policy, mandate,
// approval or endpoint it may not touch) is no first call and changes
// nothing (contract §4), so it is left out: else an agent holding only
// billing:admin could spend its principal's budget and rate-limit the
// person's own console. The filters only narrow what the partial index
// audit_events_rate_idx (org, principal, at) finds.
func queueActivity(batch *pgx.Batch, org, principal string, window time.Duration, a *billing.Activity) {
	batch.Queue(`
		SELECT count(*) FILTER (WHERE event <> 'TOKEN_REJECTED'), count(*) FILTER (WHERE event = 'TOKEN_REJECTED'),
			min(at) FILTER (WHERE event <> 'TOKEN_REJECTED'), min(at) FILTER (WHERE event = 'TOKEN_REJECTED'), now()
		FROM audit_events
		WHERE org = $1 AND principal = $2 AND event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED', 'OPERATION_DENIED')
			AND (event <> 'OPERATION_DENIED' OR (confirmation_id = '' AND reason <> $4))
			AND at > now() - $3 * interval '1 microsecond'`,
		org, principal, window.Microseconds(), billing.ReasonPersonRequired).QueryRow(func(row pgx.Row) error {
		return row.Scan(&a.Issued, &a.Rejected, optionalTime{&a.OldestIssued}, optionalTime{&a.OldestRejected}, &a.Now)
	})
}

// ExecutedSince implements billing.Store.
func (s *Store) ExecutedSince(ctx context.Context, org string, window time.Duration) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, executedSinceSQL, org, window.Microseconds()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count executed changes: %w", classify(err))
	}
	return n, nil
}

const executedSinceSQL = `SELECT count(*) FROM audit_events
		WHERE org = $1 AND event = 'OPERATION_EXECUTED' AND at > now() - $2 * interval '1 microsecond'`

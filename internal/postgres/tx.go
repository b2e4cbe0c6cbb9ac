package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
)

// storeTx implements billing.Tx on one connection, in as few round trips
// as the step allows. Nothing is sent before the step's first statement:
// BEGIN goes in front of it. Writes (Record, SavePolicy) wait for whatever
// is sent next, the step's next read or its COMMIT, and go in front of it.
// Every statement still runs in the order the step made it, inside the one
// transaction; what changes is only when it is sent, so a write's error
// shows at the next exchange and fails it (and the transaction, which is
// rolled back whole, as before).
//
// Audit events wait longer: for the COMMIT (or the recovery point's). Their
// insert locks the org's audit chain head (the chain's trigger), so holding
// them back makes the head the last lock every transaction takes, after the
// subscription and the confirmations, and holds it for one round trip: no
// transaction waits for a confirmation while holding the head, and none
// holds it across a Stripe request.
type storeTx struct {
	conn   *pgxpool.Conn
	begun  bool               // BEGIN has been sent
	writes []*pgx.QueuedQuery // queued by the step, not sent yet
	audit  []*pgx.QueuedQuery // audit inserts, sent with the commit
	// endTimeout bounds the ROLLBACK of a step that failed, which no longer
	// depends on the client either.
	endTimeout time.Duration
}

// send runs batch after BEGIN (the first time) and the waiting writes: one
// round trip.
func (t *storeTx) send(ctx context.Context, batch *pgx.Batch) error {
	out := &pgx.Batch{}
	if !t.begun {
		out.Queue("BEGIN")
		t.begun = true
	}
	out.QueuedQueries = append(append(out.QueuedQueries, t.writes...), batch.QueuedQueries...)
	t.writes = nil
	return t.conn.SendBatch(ctx, out).Close()
}

// queryRow sends one statement and scans its row; pgx.ErrNoRows when there
// is none. No row is not an error of the batch: pgx drops every statement
// of a batch that returns one from its cache (BEGIN and the waiting writes
// included), and they would be prepared again, a round trip each.
func (t *storeTx) queryRow(ctx context.Context, dest []any, sql string, args ...any) error {
	missing := false
	batch := &pgx.Batch{}
	batch.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			missing = true
			return nil
		}
		return err
	})
	if err := t.send(ctx, batch); err != nil {
		return err
	}
	if missing {
		return pgx.ErrNoRows
	}
	return nil
}

// write queues statements to go with the next exchange.
func (t *storeTx) write(batch *pgx.Batch) {
	t.writes = append(t.writes, batch.QueuedQueries...)
}

// takeAudit returns the held-back audit inserts and forgets them.
func (t *storeTx) takeAudit() []*pgx.QueuedQuery {
	a := t.audit
	t.audit = nil
	return a
}

// errCommitRolledBack: COMMIT answered ROLLBACK, the transaction had failed.
var errCommitRolledBack = errors.New("the transaction was rolled back")

// commit sends the waiting writes and COMMIT: one round trip, none for a
// step that sent and wrote nothing.
func (t *storeTx) commit(ctx context.Context) error {
	if !t.begun && len(t.writes) == 0 && len(t.audit) == 0 {
		return nil
	}
	batch := &pgx.Batch{QueuedQueries: t.takeAudit()}
	batch.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return errCommitRolledBack
		}
		return nil
	})
	return t.send(ctx, batch)
}

// rollback ends a transaction that was begun and not committed; the
// waiting writes are dropped. Should ROLLBACK fail, the pool closes the
// connection when it comes back still inside the transaction.
func (t *storeTx) rollback(ctx context.Context) {
	t.writes, t.audit = nil, nil
	if t.conn.Conn().PgConn().TxStatus() == 'I' {
		return // never begun, or over
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.endTimeout)
	defer cancel()
	_, _ = t.conn.Exec(ctx, "ROLLBACK")
}

const confirmationColumns = `c.id, c.token_hash, c.org, c.principal, c.client, c.operation, c.status,
	c.from_plan, c.to_plan, c.from_price_id, c.to_price_id, c.from_amount_cents, c.to_amount_cents, c.currency,
	c.proration_date, c.subscription_version, c.amount_due_cents, c.credit_cents, c.next_charge_at,
	c.summary, c.created_at, c.expires_at, coalesce(c.approval, ''), coalesce(c.approver, ''),
	c.agent, c.attempt, c.result, c.sent_at, c.attempted_at, coalesce(c.failure, ''),
	c.approver_auth_time, coalesce(c.approver_acr, ''), c.livemode,
	c.subtotal_cents, c.discount_cents, c.tax_cents, c.credit_applied_cents, c.consent,
	c.at_period_end, c.at_renewal, c.cancels, c.from_status,
	c.restore_owed, c.restore_tries, c.restore_owed_since, coalesce(c.restore_settled, ''),
	c.approvals_required, c.approvers, c.quantity, c.quantity_to,
	c.cancellation, c.cancel_reason, c.cancel_comment, c.from_cancel_at_period_end, ` + verificationColumns

// verificationColumns are the verify level's columns of a confirmation c.
const verificationColumns = `c.verify_required, c.verified_at, coalesce(c.verified_method, ''),
	c.verified_auth_time, coalesce(c.verified_acr, '')`

func scanConfirmation(c *billing.Confirmation) []any {
	t := &c.Terms
	return append([]any{&c.ID, &c.TokenHash, &c.Org, &c.Principal, &c.Client, &c.Operation, &c.Status,
		&t.FromPlan, &t.ToPlan, &t.FromPriceID, &t.ToPriceID, &t.FromAmountCents, &t.ToAmountCents, &t.Currency,
		&t.ProrationDate, &t.SubscriptionVer, &t.AmountDueCents, &t.CreditCents, &t.NextChargeAt,
		&c.Summary, &c.CreatedAt, &c.ExpiresAt, &c.Approval, &c.Approver,
		&c.Agent, &c.Attempt, &c.Result, optionalTime{&c.SentAt}, optionalTime{&c.AttemptedAt}, &c.Failure,
		optionalTime{&c.ApproverAuth.AuthTime}, &c.ApproverAuth.ACR, &t.Livemode,
		&t.SubtotalCents, &t.DiscountCents, &t.TaxCents, &t.CreditAppliedCents, &c.Consent,
		&t.AtPeriodEnd, &t.AtRenewal, &t.Cancels, &t.FromStatus,
		&c.Restore.Owed, &c.Restore.Tries, optionalTime{&c.Restore.Since}, &c.Restore.Settled,
		&c.ApprovalsRequired, &c.Approvers, &t.Quantity, &t.ToQuantity,
		&t.Cancellation, &t.CancelReason, &t.CancelComment, &t.FromCancelAtPeriodEnd}, scanVerification(c)...)
}

// scanVerification scans verificationColumns; Verification stays nil until
// the row has verified_at.
func scanVerification(c *billing.Confirmation) []any {
	v := &billing.Verification{}
	return []any{&c.VerifyRequired, verifiedAt{c: c, v: v}, &v.Method, optionalTime{&v.AuthTime}, &v.ACR}
}

// optionalTime scans a nullable timestamptz; NULL is the zero time.
type optionalTime struct{ t *time.Time }

func (o optionalTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*o.t = time.Time{}
	case time.Time:
		*o.t = v
	default:
		return fmt.Errorf("timestamptz: unexpected %T", src)
	}
	return nil
}

// verifiedAt scans verified_at and links the verification to the
// confirmation when it is set.
type verifiedAt struct {
	c *billing.Confirmation
	v *billing.Verification
}

func (s verifiedAt) Scan(src any) error {
	if src == nil {
		s.c.Verification = nil
		return nil
	}
	if err := (optionalTime{&s.v.VerifiedAt}).Scan(src); err != nil {
		return err
	}
	s.c.Verification = s.v
	return nil
}

// LockByToken implements billing.Tx. The subscription row is locked before
// the confirmation (lockSubscriptionOfToken): every step that locks both
// (second calls, webhooks, the settler) does so in that order, so two of
// them never wait for each other in a cycle. Holding the subscription, two
// different confirmations of one org execute one after the other, and the
// second sees the first's new subscription version. Whether another
// confirmation of the org is executing, the org's policy and the clock are
// read by a third statement of the same round trip: it runs once the locks
// are held, with a snapshot of its own, so it sees what the previous holder
// (or an admin saving the policy) committed meanwhile; the locking
// statements re-read only the rows they lock, and their now() is the
// transaction's start, before any wait.
func (t *storeTx) LockByToken(ctx context.Context, org, principal string, tokenHash []byte) (billing.Confirmation, billing.Account, time.Time, error) {
	batch := &pgx.Batch{}
	batch.Queue(lockSubscriptionOfToken, tokenHash, org, principal)
	return t.lockConfirmation(ctx, batch, lockByTokenSQL, []any{tokenHash, org, principal}, afterLockSQL, org, tokenHash)
}

// ReadActivity implements billing.Tx: the count goes in front of the
// step's next statement (after BEGIN), like a held-back write, and is
// scanned when that exchange returns.
func (t *storeTx) ReadActivity(org, principal string, window time.Duration, into *billing.Activity) {
	batch := &pgx.Batch{}
	queueActivity(batch, org, principal, window, into)
	t.write(batch)
}

// lockConfirmationSQL reads a confirmation with its account and the clock;
// lockByTokenSQL and relockByIDSQL complete it.
const lockConfirmationSQL = `SELECT ` + confirmationColumns + `, ` + accountColumns + `, now()
		FROM confirmations c JOIN ` + accountFrom + ` ON o.id = c.org
		WHERE `

const lockByTokenSQL = lockConfirmationSQL + `c.token_hash = $1 AND c.org = $2 AND c.principal = $3
		FOR UPDATE OF c, s`

const relockByIDSQL = lockConfirmationSQL + `c.id = $1 FOR UPDATE OF c, s`

// lockSubscriptionOfToken locks the subscription of the confirmation with
// token hash $1, if it is org $2's and principal $3's: the first lock.
const lockSubscriptionOfToken = `SELECT 1 FROM subscriptions s WHERE s.org = $2 AND EXISTS (
	SELECT 1 FROM confirmations c WHERE c.token_hash = $1 AND c.org = $2 AND c.principal = $3) FOR UPDATE OF s`

// lockConfirmation queues, after what batch holds, the statement that locks
// (again) a confirmation with its account (lockByTokenSQL or
// relockByIDSQL, over args) and the after-lock statement (afterLockSQL or
// afterRelockSQL, over afterArgs), and sends them: one round trip.
func (t *storeTx) lockConfirmation(ctx context.Context, batch *pgx.Batch, lockSQL string, args []any,
	afterLock string, afterArgs ...any) (billing.Confirmation, billing.Account, time.Time, error) {
	var c billing.Confirmation
	var a billing.Account
	var now time.Time
	dest := append(append(scanConfirmation(&c), scanAccount(&a)...), &now)
	found := false
	batch.Queue(lockSQL, args...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(dest...)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // not an error of the batch: see queryRow
		}
		return err
	})
	batch.Queue(afterLock, afterArgs...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&a.Unsettled, policyColumn{&a.Policy}, &now)
	})
	if err := t.send(ctx, batch); err != nil {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, fmt.Errorf("lock confirmation: %w", classify(err))
	}
	if !found {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	a.Subscription.Org = a.Org.ID
	return c, a, now, nil
}

// recoveryPointSQL marks confirmation $1 executing under attempt $2, with
// how the person agreed ($3) when the step knows it.
const recoveryPointSQL = `UPDATE confirmations SET status = 'executing', attempt = $2, attempted_at = clock_timestamp(),
		sent_at = coalesce(sent_at, clock_timestamp()), consent = coalesce($3, consent),
		mandate_id = coalesce($3::jsonb ->> 'mandate_id', mandate_id) WHERE id = $1`

// SaveRecoveryPoint implements billing.Tx in one round trip: the waiting
// writes, the confirmation marked executing, COMMIT, then BEGIN and the
// locks again (subscription first) with the account, policy and clock.
// Statements of one pipeline run in order; COMMIT ends the transaction
// there, and what follows it runs in a new one.
func (t *storeTx) SaveRecoveryPoint(ctx context.Context, confirmationID string, attempt int, consent *billing.Consent) (billing.Confirmation, billing.Account, time.Time, error) {
	if !t.begun {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, errors.New("recovery point outside a transaction")
	}
	committed := false
	batch := &pgx.Batch{}
	batch.Queue(recoveryPointSQL, confirmationID, attempt, consent)
	batch.QueuedQueries = append(batch.QueuedQueries, t.takeAudit()...)
	batch.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return errCommitRolledBack
		}
		committed = true
		return nil
	})
	batch.Queue("BEGIN")
	batch.Queue(relockSubscriptionSQL, confirmationID)
	c, a, now, err := t.lockConfirmation(ctx, batch, relockByIDSQL, []any{confirmationID}, afterRelockSQL, confirmationID)
	var pgErr *pgconn.PgError
	if err != nil && (committed || !errors.As(err, &pgErr)) {
		// COMMIT answered, or may have run with its answer lost (the
		// connection failed, the context ended): only the server refusing
		// a statement before it says for sure that nothing was saved.
		err = fmt.Errorf("%w: %w", billing.ErrRecoveryPointSaved, err)
	}
	if err != nil {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, fmt.Errorf("recovery point: %w", err)
	}
	return c, a, now, nil
}

// afterLockSQL asks whether a confirmation of org other than the one with
// token hash $2 is executing, and reads the org's policy and the clock.
const afterLockSQL = `SELECT EXISTS (SELECT 1 FROM confirmations
	WHERE org = $1 AND status = 'executing' AND token_hash <> $2),
	(SELECT policy FROM org_policies WHERE org = $1), clock_timestamp()`

// relockSubscriptionSQL locks the subscription of confirmation $1 again:
// the first lock of the transaction after a recovery point.
const relockSubscriptionSQL = `SELECT 1 FROM subscriptions s JOIN confirmations c ON c.org = s.org WHERE c.id = $1 FOR UPDATE OF s`

// afterRelockSQL is afterLockSQL for the confirmation with id $1.
const afterRelockSQL = `WITH this AS (SELECT id, org FROM confirmations WHERE id = $1)
	SELECT EXISTS (SELECT 1 FROM confirmations x, this WHERE x.org = this.org AND x.status = 'executing' AND x.id <> this.id),
	(SELECT policy FROM org_policies p, this WHERE p.org = this.org), clock_timestamp()`

// LockUnsettled implements billing.Tx.
func (t *storeTx) LockUnsettled(ctx context.Context, idle time.Duration, skip []string) (billing.Confirmation, billing.Account, time.Time, error) {
	return t.lockNext(ctx, "lock unsettled confirmation",
		`c.status = 'executing' AND c.attempted_at < now() - $2 * interval '1 microsecond'`, `c.attempted_at`,
		skip, idle.Microseconds())
}

// LockOwedRestore implements billing.Tx.
func (t *storeTx) LockOwedRestore(ctx context.Context, skip []string) (billing.Confirmation, billing.Account, time.Time, error) {
	return t.lockNext(ctx, "lock owed restore", `c.restore_owed`, `c.restore_owed_since`, skip)
}

// LockLapsedApproval implements billing.Tx. It locks the confirmation
// only: deciding an approval locks no subscription either, and a second
// call that holds the subscription and waits for this row is never waited
// for in turn.
func (t *storeTx) LockLapsedApproval(ctx context.Context, skew time.Duration, skip []string) (billing.Confirmation, time.Time, error) {
	if skip == nil {
		skip = []string{} // <> ALL(NULL) would match nothing
	}
	var c billing.Confirmation
	var now time.Time
	err := t.queryRow(ctx, append(scanConfirmation(&c), &now), `SELECT `+confirmationColumns+`, now()
		FROM confirmations c
		WHERE c.status = 'pending' AND c.approval = 'pending' AND c.expires_at < now() - $2 * interval '1 microsecond'
			AND c.id <> ALL($1)
		ORDER BY c.expires_at LIMIT 1
		FOR UPDATE OF c SKIP LOCKED`, skip, skew.Microseconds())
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Confirmation{}, time.Time{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Confirmation{}, time.Time{}, fmt.Errorf("lock lapsed approval: %w", classify(err))
	}
	return c, now, nil
}

// lockNext locks the first confirmation (by orderBy) that where picks, not
// in skip ($1) nor held by another transaction, with its account: the one
// query of the background rounds (settling, restoring). args are $2, ….
func (t *storeTx) lockNext(ctx context.Context, what, where, orderBy string, skip []string, args ...any) (
	billing.Confirmation, billing.Account, time.Time, error) {
	if skip == nil {
		skip = []string{} // <> ALL(NULL) would match nothing
	}
	var c billing.Confirmation
	var a billing.Account
	var now time.Time
	err := t.queryRow(ctx, append(append(scanConfirmation(&c), scanAccount(&a)...), &now),
		`SELECT `+confirmationColumns+`, `+accountColumns+`, now()
		FROM confirmations c JOIN `+accountFrom+` ON o.id = c.org
		WHERE `+where+` AND c.id <> ALL($1)
		ORDER BY `+orderBy+` LIMIT 1
		FOR UPDATE OF c, s SKIP LOCKED`, append([]any{skip}, args...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, fmt.Errorf("%s: %w", what, classify(err))
	}
	a.Subscription.Org = a.Org.ID
	return c, a, now, nil
}

// ExecutedSince implements billing.Tx, on the transaction's connection.
func (t *storeTx) ExecutedSince(ctx context.Context, org string, window time.Duration) (int, error) {
	var n int
	if err := t.queryRow(ctx, []any{&n}, executedSinceSQL, org, window.Microseconds()); err != nil {
		return 0, fmt.Errorf("count executed changes: %w", classify(err))
	}
	return n, nil
}

// LockByID implements billing.Tx.
func (t *storeTx) LockByID(ctx context.Context, org, id string) (billing.Confirmation, time.Time, error) {
	var c billing.Confirmation
	var now time.Time
	err := t.queryRow(ctx, append(scanConfirmation(&c), &now), `SELECT `+confirmationColumns+`, now()
		FROM confirmations c WHERE c.id = $1 AND c.org = $2 FOR UPDATE`, id, org)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Confirmation{}, time.Time{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Confirmation{}, time.Time{}, fmt.Errorf("lock confirmation: %w", classify(err))
	}
	return c, now, nil
}

// Record implements billing.Tx: the writes wait for the transaction's next
// exchange (see storeTx).
func (t *storeTx) Record(ctx context.Context, r billing.Record) error {
	batch := &pgx.Batch{}
	if r.Status != "" {
		// A new status comes with the attempt that led to it and, once
		// executed, the answer to replay: one statement. attempted_at is the
		// wall clock at the end of the attempt, not the transaction's start
		// (now()), so a slow attempt is not already "idle" for the
		// reconciler when it commits.
		batch.Queue(`UPDATE confirmations SET status = $2, finished_at = now(), attempt = coalesce($3, attempt),
			attempted_at = CASE WHEN $3::integer IS NULL THEN attempted_at ELSE clock_timestamp() END, result = coalesce($4, result),
			failure = coalesce(NULLIF($5, ''), failure)
			WHERE id = $1`, r.ConfirmationID, string(r.Status), r.Attempt, r.Result, r.Failure)
	}
	if sub := r.Subscription; sub != nil {
		batch.Queue(`UPDATE subscriptions SET plan = $2, status = $3, current_period_end = $4, stripe_item_id = $5,
			synced_at = coalesce($6, synced_at), scheduled = $7, quantity = $8, cancel_at_period_end = $9, canceled_at = $10,
			version = version + 1, updated_at = now() WHERE org = $1`,
			sub.Org, sub.Plan, sub.Status, sub.CurrentPeriodEnd, sub.StripeItemID, nullTime(sub.SyncedAt), sub.Scheduled,
			max(sub.Quantity, 1), sub.CancelAtPeriodEnd, nullTime(sub.CanceledAt))
	}
	if d := r.Restore; d != nil {
		batch.Queue(`UPDATE confirmations SET restore_owed = $2, restore_tries = $3, restore_settled = NULLIF($4, ''),
			restore_owed_since = CASE WHEN $2 THEN coalesce(restore_owed_since, now()) ELSE restore_owed_since END
			WHERE id = $1`, r.ConfirmationID, d.Owed, d.Tries, d.Settled)
	}
	if a := r.Approval; a != nil {
		batch.Queue(`UPDATE confirmations SET approval = $2, approver = $3, approver_auth_time = $4, approver_acr = NULLIF($5, ''),
			approvers = coalesce($6, approvers), approvals_required = coalesce(NULLIF($7, 0), approvals_required)
			WHERE id = $1`, r.ConfirmationID, string(a.State), a.Approver, nullTime(a.Auth.AuthTime), a.Auth.ACR,
			a.Approvers, a.Required)
	}
	if r.Agent {
		batch.Queue(`UPDATE confirmations SET agent = true WHERE id = $1`, r.ConfirmationID)
	}
	if r.RequireVerification {
		batch.Queue(`UPDATE confirmations SET verify_required = true WHERE id = $1`, r.ConfirmationID)
	}
	if v := r.Verification; v != nil {
		batch.Queue(`UPDATE confirmations SET verified_at = coalesce($2, now()), verified_method = $3,
			verified_auth_time = $4, verified_acr = NULLIF($5, '') WHERE id = $1`,
			r.ConfirmationID, nullTime(v.VerifiedAt), v.Method, nullTime(v.AuthTime), v.ACR)
	}
	if sub := r.SyncedSubscription; sub != nil {
		batch.Queue(`UPDATE subscriptions SET synced_at = $2 WHERE org = $1`, sub.Org, nullTime(sub.SyncedAt))
	}
	if r.Receipt != nil {
		queueReceipt(batch, r.Receipt)
	}
	t.write(batch)
	audit := &pgx.Batch{}
	queueAudit(audit, r.Events)
	t.audit = append(t.audit, audit.QueuedQueries...)
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// LockSubscription implements billing.Tx.
func (t *storeTx) LockSubscription(ctx context.Context, stripeSubscriptionID string) (billing.Account, error) {
	var a billing.Account
	err := t.queryRow(ctx, scanAccount(&a), `SELECT `+accountColumns+`
		FROM `+accountFrom+`
		WHERE s.stripe_subscription_id = $1 FOR UPDATE OF s`, stripeSubscriptionID)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Account{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Account{}, fmt.Errorf("lock subscription: %w", classify(err))
	}
	a.Subscription.Org = a.Org.ID
	return a, nil
}

// LockDueScheduled implements billing.Tx.
func (t *storeTx) LockDueScheduled(ctx context.Context, grace time.Duration, skip []string) (billing.Account, error) {
	if skip == nil {
		skip = []string{} // <> ALL(NULL) would match nothing
	}
	var a billing.Account
	err := t.queryRow(ctx, scanAccount(&a), `SELECT `+accountColumns+`
		FROM `+accountFrom+`
		WHERE (s.scheduled IS NOT NULL AND (s.scheduled->>'at')::timestamptz < now() - $1 * interval '1 microsecond'
				OR s.cancel_at_period_end AND s.status <> 'canceled' AND s.current_period_end < now() - $1 * interval '1 microsecond')
			AND s.stripe_subscription_id <> ALL($2)
		ORDER BY coalesce((s.scheduled->>'at')::timestamptz, s.current_period_end) LIMIT 1
		FOR UPDATE OF s SKIP LOCKED`, grace.Microseconds(), skip)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Account{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Account{}, fmt.Errorf("lock due scheduled change: %w", classify(err))
	}
	a.Subscription.Org = a.Org.ID
	return a, nil
}

// LockPending implements billing.Tx.
func (t *storeTx) LockPending(ctx context.Context, org string) ([]billing.Confirmation, error) {
	var cs []billing.Confirmation
	batch := &pgx.Batch{}
	batch.Queue(`SELECT `+confirmationColumns+`
		FROM confirmations c WHERE c.org = $1 AND c.status = 'pending' FOR UPDATE`, org).Query(func(rows pgx.Rows) (err error) {
		cs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (billing.Confirmation, error) {
			var c billing.Confirmation
			err := row.Scan(scanConfirmation(&c)...)
			return c, err
		})
		return err
	})
	if err := t.send(ctx, batch); err != nil {
		return nil, fmt.Errorf("lock pending: %w", classify(err))
	}
	return cs, nil
}

// MarkEventProcessed implements billing.Tx.
func (t *storeTx) MarkEventProcessed(ctx context.Context, eventID string) (bool, error) {
	inserted := false
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO stripe_events (id) VALUES ($1)
		ON CONFLICT (id) DO NOTHING`, eventID).Exec(func(tag pgconn.CommandTag) error {
		inserted = tag.RowsAffected() == 1
		return nil
	})
	if err := t.send(ctx, batch); err != nil {
		return false, fmt.Errorf("mark event: %w", classify(err))
	}
	return inserted, nil
}

// SavePolicy implements billing.Tx; the write waits like Record's.
func (t *storeTx) SavePolicy(_ context.Context, org string, p billing.Policy, by string) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO org_policies (org, policy, updated_by) VALUES ($1, $2, $3)
		ON CONFLICT (org) DO UPDATE SET policy = excluded.policy, updated_by = excluded.updated_by, updated_at = now()`,
		org, data, by)
	t.write(batch)
	return nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/billing"
)

// storeTx implements billing.Tx.
type storeTx struct {
	tx pgx.Tx
}

const confirmationColumns = `c.id, c.token_hash, c.org, c.principal, c.client, c.operation, c.status,
	c.from_plan, c.to_plan, c.from_price_id, c.to_price_id, c.from_amount_cents, c.to_amount_cents, c.currency,
	c.proration_date, c.subscription_version, c.amount_due_cents, c.credit_cents, c.next_charge_at,
	c.summary, c.created_at, c.expires_at, coalesce(c.approval, ''), coalesce(c.approver, ''), c.livemode`

func scanConfirmation(c *billing.Confirmation) []any {
	t := &c.Terms
	return []any{&c.ID, &c.TokenHash, &c.Org, &c.Principal, &c.Client, &c.Operation, &c.Status,
		&t.FromPlan, &t.ToPlan, &t.FromPriceID, &t.ToPriceID, &t.FromAmountCents, &t.ToAmountCents, &t.Currency,
		&t.ProrationDate, &t.SubscriptionVer, &t.AmountDueCents, &t.CreditCents, &t.NextChargeAt,
		&c.Summary, &c.CreatedAt, &c.ExpiresAt, &c.Approval, &c.Approver, &t.Livemode}
}

// LockByToken implements billing.Tx. The subscription row is locked with the
// confirmation so that two different confirmations of one org execute one
// after the other, and the second sees the first's new subscription version.
func (t *storeTx) LockByToken(ctx context.Context, org, principal string, tokenHash []byte) (billing.Confirmation, billing.Account, time.Time, error) {
	var c billing.Confirmation
	var a billing.Account
	var now time.Time
	dest := append(append(scanConfirmation(&c), scanAccount(&a)...), &now)
	err := t.tx.QueryRow(ctx, `SELECT `+confirmationColumns+`, `+accountColumns+`, now()
		FROM confirmations c JOIN `+accountFrom+` ON o.id = c.org
		WHERE c.token_hash = $1 AND c.org = $2 AND c.principal = $3
		FOR UPDATE OF c, s`, tokenHash, org, principal).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Confirmation{}, billing.Account{}, time.Time{}, fmt.Errorf("lock confirmation: %w", classify(err))
	}
	a.Subscription.Org = a.Org.ID
	return c, a, now, nil
}

// LockByID implements billing.Tx.
func (t *storeTx) LockByID(ctx context.Context, org, id string) (billing.Confirmation, time.Time, error) {
	var c billing.Confirmation
	var now time.Time
	err := t.tx.QueryRow(ctx, `SELECT `+confirmationColumns+`, now()
		FROM confirmations c WHERE c.id = $1 AND c.org = $2 FOR UPDATE`, id, org).
		Scan(append(scanConfirmation(&c), &now)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Confirmation{}, time.Time{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Confirmation{}, time.Time{}, fmt.Errorf("lock confirmation: %w", classify(err))
	}
	return c, now, nil
}

// Record implements billing.Tx: every write of the step goes in one batch,
// one round trip.
func (t *storeTx) Record(ctx context.Context, r billing.Record) error {
	batch := &pgx.Batch{}
	if r.Status != "" {
		batch.Queue(`UPDATE confirmations SET status = $2, finished_at = now() WHERE id = $1`, r.ConfirmationID, string(r.Status))
	}
	if sub := r.Subscription; sub != nil {
		batch.Queue(`UPDATE subscriptions SET plan = $2, status = $3, current_period_end = $4, stripe_item_id = $5,
			synced_at = coalesce($6, synced_at), version = version + 1, updated_at = now() WHERE org = $1`,
			sub.Org, sub.Plan, sub.Status, sub.CurrentPeriodEnd, sub.StripeItemID, nullTime(sub.SyncedAt))
	}
	if a := r.Approval; a != nil {
		batch.Queue(`UPDATE confirmations SET approval = $2, approver = $3 WHERE id = $1`,
			r.ConfirmationID, string(a.State), a.Approver)
	}
	if sub := r.SyncedSubscription; sub != nil {
		batch.Queue(`UPDATE subscriptions SET synced_at = $2 WHERE org = $1`, sub.Org, nullTime(sub.SyncedAt))
	}
	if r.Receipt != nil {
		queueReceipt(batch, r.Receipt)
	}
	queueAudit(batch, r.Events)
	if batch.Len() == 0 {
		return nil
	}
	if err := t.tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("record: %w", classify(err))
	}
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
	err := t.tx.QueryRow(ctx, `SELECT `+accountColumns+`
		FROM `+accountFrom+`
		WHERE s.stripe_subscription_id = $1 FOR UPDATE OF s`, stripeSubscriptionID).Scan(scanAccount(&a)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Account{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.Account{}, fmt.Errorf("lock subscription: %w", classify(err))
	}
	a.Subscription.Org = a.Org.ID
	return a, nil
}

// LockPending implements billing.Tx.
func (t *storeTx) LockPending(ctx context.Context, org string) ([]billing.Confirmation, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+confirmationColumns+`
		FROM confirmations c WHERE c.org = $1 AND c.status = 'pending' FOR UPDATE`, org)
	if err != nil {
		return nil, fmt.Errorf("lock pending: %w", classify(err))
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (billing.Confirmation, error) {
		var c billing.Confirmation
		err := row.Scan(scanConfirmation(&c)...)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("lock pending: %w", classify(err))
	}
	return cs, nil
}

// MarkEventProcessed implements billing.Tx.
func (t *storeTx) MarkEventProcessed(ctx context.Context, eventID string) (bool, error) {
	tag, err := t.tx.Exec(ctx, `INSERT INTO stripe_events (id) VALUES ($1)
		ON CONFLICT (id) DO NOTHING`, eventID)
	if err != nil {
		return false, fmt.Errorf("mark event: %w", classify(err))
	}
	return tag.RowsAffected() == 1, nil
}

// SavePolicy implements billing.Tx.
func (t *storeTx) SavePolicy(ctx context.Context, org string, p billing.Policy, by string) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = t.tx.Exec(ctx, `INSERT INTO org_policies (org, policy, updated_by) VALUES ($1, $2, $3)
		ON CONFLICT (org) DO UPDATE SET policy = excluded.policy, updated_by = excluded.updated_by, updated_at = now()`,
		org, data, by)
	if err != nil {
		return fmt.Errorf("save policy: %w", classify(err))
	}
	return nil
}

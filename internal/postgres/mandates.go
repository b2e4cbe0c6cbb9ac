package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/billing"
)

// Standing mandates (billing/mandate.go). What a mandate spent is read
// from its confirmations, executing or executed (confirmations.mandate_id
// is generated from the consent the recovery point writes), never kept
// in a counter that a change not made would have to give back.

var (
	_ billing.MandateStore = (*Store)(nil)
	_ interface {
		LockMandate(ctx context.Context, org, id string) (billing.Mandate, time.Time, error)
	} = (*storeTx)(nil)
)

const mandateColumns = `m.id, m.org, m.principal, m.client, m.operations, m.to_plans, m.max_amount_due_cents,
	m.budget_cents, m.max_changes, m.currency, m.created_at, m.expires_at, m.revoked_at, coalesce(m.revoked_by, ''), m.jws,
	m.max_quantity`

// mandateUsage is what the confirmations executed or executing under
// mandate m spent: their quoted amounts due now, and their number.
const mandateUsage = `coalesce((SELECT sum(c.amount_due_cents) FROM confirmations c
		WHERE c.mandate_id = m.id AND c.status IN ('executing', 'executed')), 0),
	(SELECT count(*) FROM confirmations c WHERE c.mandate_id = m.id AND c.status IN ('executing', 'executed'))`

// mandateStatus is the mandate's status as of the statement's now().
const mandateStatus = `CASE WHEN m.revoked_at IS NOT NULL THEN 'revoked'
	WHEN m.expires_at <= now() THEN 'expired' ELSE 'active' END`

func scanMandate(m *billing.Mandate) []any {
	return []any{&m.ID, &m.Org, &m.Principal, &m.Client, &m.Operations, &m.ToPlans, &m.MaxAmountDueCents,
		&m.BudgetCents, &m.MaxChanges, &m.Currency, &m.CreatedAt, &m.ExpiresAt, &m.RevokedAt, &m.RevokedBy, &m.JWS,
		&m.MaxQuantity}
}

// withUsage completes a scanned mandate: its currency's digits.
func withUsage(m billing.Mandate) billing.Mandate {
	m.CurrencyDigits = billing.DigitsOf(m.Currency)
	return m
}

// InsertMandate implements billing.MandateStore.
func (s *Store) InsertMandate(ctx context.Context, m billing.Mandate, event billing.AuditEvent) error {
	return s.InTx(ctx, func(btx billing.Tx) error {
		t := btx.(*storeTx)
		batch := &pgx.Batch{}
		batch.Queue(`INSERT INTO mandates (id, org, principal, client, operations, to_plans, max_amount_due_cents,
			budget_cents, max_changes, currency, created_at, expires_at, jws, max_quantity)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			m.ID, m.Org, m.Principal, m.Client, m.Operations, m.ToPlans, m.MaxAmountDueCents,
			m.BudgetCents, m.MaxChanges, m.Currency, m.CreatedAt, m.ExpiresAt, m.JWS, m.MaxQuantity)
		t.write(batch)
		return t.Record(ctx, billing.Record{Events: []billing.AuditEvent{event}})
	})
}

// Mandates implements billing.MandateStore.
func (s *Store) Mandates(ctx context.Context, org, principal, client string) ([]billing.Mandate, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+mandateColumns+`, `+mandateStatus+`, `+mandateUsage+`
		FROM mandates m WHERE m.org = $1 AND ($2 = '' OR m.principal = $2) AND ($3 = '' OR m.client = $3)
		ORDER BY m.created_at DESC, m.id LIMIT 500`, org, principal, client)
	if err != nil {
		return nil, fmt.Errorf("list mandates: %w", classify(err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (billing.Mandate, error) {
		var m billing.Mandate
		err := row.Scan(append(scanMandate(&m), &m.Status, &m.SpentCents, &m.Changes)...)
		return withUsage(m), err
	})
	if err != nil {
		return nil, fmt.Errorf("list mandates: %w", classify(err))
	}
	return list, nil
}

// RevokeMandate implements billing.MandateStore: the row is locked, so a
// second call deciding on the mandate either finished its recovery point
// before (its change counts, and goes on) or sees it revoked.
func (s *Store) RevokeMandate(ctx context.Context, org, id, by string, allowed func(billing.Mandate) bool,
	event billing.AuditEvent) (billing.Mandate, error) {
	var m billing.Mandate
	err := s.InTx(ctx, func(btx billing.Tx) error {
		t := btx.(*storeTx)
		locked, _, err := t.LockMandate(ctx, org, id)
		if err != nil {
			return err
		}
		if !allowed(locked) {
			return billing.ErrNotFound
		}
		if locked.RevokedAt != nil {
			m = locked
			return nil
		}
		err = t.queryRow(ctx, []any{&locked.RevokedAt, &locked.RevokedBy},
			`UPDATE mandates SET revoked_at = now(), revoked_by = $3 WHERE id = $1 AND org = $2
			RETURNING revoked_at, revoked_by`, id, org, by)
		if err != nil {
			return fmt.Errorf("revoke mandate: %w", classify(err))
		}
		locked.Status = billing.MandateRevoked
		m = locked
		return t.Record(ctx, billing.Record{Events: []billing.AuditEvent{event}})
	})
	return m, err
}

// LockMandate locks the org's mandate id and returns it with what it spent
// and the database's now. The usage is read by a statement of its own,
// after the lock is held: in READ COMMITTED a statement that waited for a
// row lock still reads the rest from the snapshot it started with, and
// would miss the recovery point of the change it waited for.
func (t *storeTx) LockMandate(ctx context.Context, org, id string) (billing.Mandate, time.Time, error) {
	var m billing.Mandate
	var now time.Time
	batch := &pgx.Batch{}
	missing := false
	batch.Queue(`SELECT `+mandateColumns+` FROM mandates m WHERE m.id = $1 AND m.org = $2 FOR UPDATE OF m`, id, org).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(scanMandate(&m)...)
			if errors.Is(err, pgx.ErrNoRows) {
				missing = true
				return nil
			}
			return err
		})
	batch.Queue(`SELECT `+mandateStatus+`, `+mandateUsage+`, now() FROM mandates m WHERE m.id = $1`, id).
		QueryRow(func(row pgx.Row) error {
			if missing {
				return nil
			}
			return row.Scan(&m.Status, &m.SpentCents, &m.Changes, &now)
		})
	if err := t.send(ctx, batch); err != nil {
		return billing.Mandate{}, time.Time{}, fmt.Errorf("lock mandate: %w", classify(err))
	}
	if missing {
		return billing.Mandate{}, time.Time{}, billing.ErrNotFound
	}
	return withUsage(m), now, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/billing"
)

var _ billing.EvidenceStore = (*Store)(nil)

// ExportAudit implements billing.EvidenceStore. One statement, so the export
// is one consistent snapshot of the chain however long the reader takes.
// The chain itself (seq, prev_hash, hash, and receipt_sha256 binding an
// executed event's receipt) is written by the audit_events trigger of
// migrations 000006 and 000011, for every writer.
func (s *Store) ExportAudit(ctx context.Context, org string, fn func(billing.ChainedEvent) error) error {
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, e.at, e.event, e.org, e.principal, e.client, e.operation, e.confirmation_id, e.outcome,
			e.reason, e.request_id, e.consent, e.seq, e.prev_hash, e.hash, coalesce(r.receipt, ''), e.receipt_sha256
		FROM audit_events e
		LEFT JOIN receipts r ON e.event = 'OPERATION_EXECUTED' AND r.confirmation_id = e.confirmation_id AND r.org = e.org
		WHERE e.org = $1 ORDER BY e.seq`, org)
	if err != nil {
		return fmt.Errorf("export audit log: %w", classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var e billing.ChainedEvent
		a := &e.AuditEvent
		if err := rows.Scan(&a.ID, &a.At, &a.Event, &a.Org, &a.Principal, &a.Client, &a.Operation, &a.ConfirmationID,
			&a.Outcome, &a.Reason, &a.RequestID, &a.Consent, &e.Seq, &e.PrevHash, &e.Hash, &e.Receipt,
			&e.ReceiptSHA256); err != nil {
			return fmt.Errorf("export audit log: %w", classify(err))
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("export audit log: %w", classify(err))
	}
	return nil
}

// Receipt implements billing.EvidenceStore.
func (s *Store) Receipt(ctx context.Context, org, confirmationID string) (billing.StoredReceipt, error) {
	r := billing.StoredReceipt{ConfirmationID: confirmationID, Org: org}
	err := s.pool.QueryRow(ctx, `SELECT principal, summary, receipt FROM receipts WHERE confirmation_id = $1 AND org = $2`,
		confirmationID, org).Scan(&r.Principal, &r.Summary, &r.Receipt)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.StoredReceipt{}, billing.ErrNotFound
	}
	if err != nil {
		return billing.StoredReceipt{}, fmt.Errorf("read receipt: %w", classify(err))
	}
	return r, nil
}

// queueReceipt stores a receipt in the batch of the step that executed its
// change.
func queueReceipt(batch *pgx.Batch, r *billing.StoredReceipt) {
	batch.Queue(`INSERT INTO receipts (confirmation_id, org, principal, summary, receipt) VALUES ($1, $2, $3, $4, $5)`,
		r.ConfirmationID, r.Org, r.Principal, r.Summary, r.Receipt)
}

// RegisterReceiptKey implements receipt.PublicKeyStore.
func (s *Store) RegisterReceiptKey(ctx context.Context, kid string, jwk []byte) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO receipt_public_keys (kid, jwk) VALUES ($1, $2)
		ON CONFLICT (kid) DO NOTHING`, kid, string(jwk)); err != nil {
		return fmt.Errorf("register receipt key: %w", classify(err))
	}
	return nil
}

// ReceiptPublicKeys implements receipt.PublicKeyStore, newest first.
func (s *Store) ReceiptPublicKeys(ctx context.Context) ([][]byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT jwk::text FROM receipt_public_keys ORDER BY created_at DESC, kid`)
	if err != nil {
		return nil, fmt.Errorf("read receipt keys: %w", classify(err))
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]byte, error) {
		var jwk string
		err := r.Scan(&jwk)
		return []byte(jwk), err
	})
	if err != nil {
		return nil, fmt.Errorf("read receipt keys: %w", classify(err))
	}
	return keys, nil
}

// RetireStoredPrivateKeys implements receipt.PublicKeyStore. The rows are
// locked, so that replicas starting together retire each key once; a row
// whose PEM does not parse is deleted too: it verifies nothing, and it is
// still a secret.
func (s *Store) RetireStoredPrivateKeys(ctx context.Context, toPublic func(pem []byte) (string, []byte, error)) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT name, private_key_pem FROM receipt_keys FOR UPDATE`)
		if err != nil {
			return fmt.Errorf("read stored receipt keys: %w", classify(err))
		}
		pems, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Name, PEM string }])
		if err != nil {
			return fmt.Errorf("read stored receipt keys: %w", classify(err))
		}
		for _, p := range pems {
			if kid, jwk, err := toPublic([]byte(p.PEM)); err == nil {
				if _, err := tx.Exec(ctx, `INSERT INTO receipt_public_keys (kid, jwk) VALUES ($1, $2)
					ON CONFLICT (kid) DO NOTHING`, kid, string(jwk)); err != nil {
					return fmt.Errorf("keep public receipt key: %w", classify(err))
				}
			}
			if _, err := tx.Exec(ctx, `DELETE FROM receipt_keys WHERE name = $1`, p.Name); err != nil {
				return fmt.Errorf("delete stored receipt key: %w", classify(err))
			}
		}
		return nil
	})
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/webhooks"
)

// Webhooks implements webhooks.Store on the store's pool. The outbox rows
// themselves are written by the database (migration 000018's trigger on
// audit_events), in the transaction of the event.
type Webhooks struct{ s *Store }

// Webhooks returns the outbound webhooks' store.
func (s *Store) Webhooks() Webhooks { return Webhooks{s} }

var _ webhooks.Store = Webhooks{}

const endpointColumns = `e.id, e.org, e.url, e.events, e.format, e.created_by, e.created_at,
	CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_until END`

func scanEndpoint(e *webhooks.Endpoint) []any {
	return []any{&e.ID, &e.Org, &e.URL, &e.Events, &e.Format, &e.CreatedBy, &e.CreatedAt, &e.PreviousSecretUntil}
}

// CreateEndpoint implements webhooks.Store.
func (w Webhooks) CreateEndpoint(ctx context.Context, e webhooks.Endpoint) (webhooks.Endpoint, error) {
	err := w.s.pool.QueryRow(ctx, `INSERT INTO webhook_endpoints (id, org, url, events, format, secret, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
		e.ID, e.Org, e.URL, e.Events, e.Format, e.Secret, e.CreatedBy).Scan(&e.CreatedAt)
	if err != nil {
		return webhooks.Endpoint{}, classify(err)
	}
	return e, nil
}

// Endpoints implements webhooks.Store: one query, the recent deliveries
// of each endpoint read by its index.
func (w Webhooks) Endpoints(ctx context.Context, org string, recent int) ([]webhooks.Endpoint, error) {
	rows, err := w.s.pool.Query(ctx, `SELECT `+endpointColumns+`,
		coalesce((SELECT jsonb_agg(r ORDER BY r.id DESC) FROM (
			SELECT d.id, d.event_id, d.type, d.created_at, d.status, d.attempts, d.last_attempt_at,
				d.last_status, d.last_error, CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at
			FROM webhook_deliveries d WHERE d.endpoint_id = e.id ORDER BY d.id DESC LIMIT $2) r), '[]')
		FROM webhook_endpoints e WHERE e.org = $1 ORDER BY e.created_at, e.id`, org, recent)
	if err != nil {
		return nil, classify(err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhooks.Endpoint, error) {
		var e webhooks.Endpoint
		var recentJSON []byte
		if err := row.Scan(append(scanEndpoint(&e), &recentJSON)...); err != nil {
			return e, err
		}
		return e, json.Unmarshal(recentJSON, &e.Recent)
	})
	if err != nil {
		return nil, classify(err)
	}
	return es, nil
}

// DeleteEndpoint implements webhooks.Store; its deliveries go with it.
func (w Webhooks) DeleteEndpoint(ctx context.Context, org, id string) error {
	tag, err := w.s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1 AND org = $2`, id, org)
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return billing.ErrNotFound
	}
	return nil
}

// RotateSecret implements webhooks.Store.
func (w Webhooks) RotateSecret(ctx context.Context, org, id, secret string, overlap time.Duration) (webhooks.Endpoint, error) {
	var e webhooks.Endpoint
	err := w.s.pool.QueryRow(ctx, `UPDATE webhook_endpoints e SET previous_secret = e.secret, secret = $3,
			previous_secret_until = now() + $4 * interval '1 microsecond'
		WHERE e.id = $1 AND e.org = $2 RETURNING `+endpointColumns,
		id, org, secret, overlap.Microseconds()).Scan(scanEndpoint(&e)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return webhooks.Endpoint{}, billing.ErrNotFound
	}
	if err != nil {
		return webhooks.Endpoint{}, classify(err)
	}
	e.Secret = secret
	return e, nil
}

// claimSQL claims up to $1 due deliveries for $2 µs: the oldest due one of
// each endpoint that has none in flight (a live lease), so that one slow
// endpoint holds at most one worker and never another endpoint's turn. The
// lock (FOR UPDATE SKIP LOCKED) re-checks that a row is still due on its
// newest version, so two replicas never claim one row; the claim itself
// moves next_attempt_at to the lease's end, which is when a claim whose
// replica died is due again. attempts counts the claim: an attempt cut
// short by a crash is one too.
const claimSQL = `
WITH candidates AS (
	SELECT DISTINCT ON (d.endpoint_id) d.id, d.next_attempt_at
	FROM webhook_deliveries d
	WHERE d.status = 'pending' AND d.next_attempt_at <= now()
		AND NOT EXISTS (SELECT 1 FROM webhook_deliveries b WHERE b.endpoint_id = d.endpoint_id
			AND b.status = 'pending' AND b.lease IS NOT NULL AND b.next_attempt_at > now())
	ORDER BY d.endpoint_id, d.next_attempt_at, d.id
), picked AS (
	SELECT d.id FROM webhook_deliveries d
	WHERE d.id IN (SELECT id FROM candidates) AND d.status = 'pending' AND d.next_attempt_at <= now()
	ORDER BY d.next_attempt_at LIMIT $1
	FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d SET attempts = d.attempts + 1, lease = gen_random_uuid(), last_attempt_at = now(),
	next_attempt_at = now() + $2 * interval '1 microsecond'
FROM picked, webhook_endpoints e
WHERE d.id = picked.id AND e.id = d.endpoint_id
RETURNING d.id, d.lease::text, d.attempts, d.event_id, d.type, d.org, d.created_at, d.data, e.url, e.format,
	array_remove(ARRAY[e.secret, CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END], NULL)`

// ClaimDeliveries implements webhooks.Store.
func (w Webhooks) ClaimDeliveries(ctx context.Context, limit int, lease time.Duration) ([]webhooks.Delivery, error) {
	rows, err := w.s.pool.Query(ctx, claimSQL, limit, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", classify(err))
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhooks.Delivery, error) {
		var d webhooks.Delivery
		err := row.Scan(&d.ID, &d.Lease, &d.Attempt, &d.EventID, &d.Type, &d.Org, &d.CreatedAt, &d.Data,
			&d.URL, &d.Format, &d.Secrets)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", classify(err))
	}
	return ds, nil
}

// RecordOutcome implements webhooks.Store: only the claim's holder
// records, so a replica that outlived its lease cannot overwrite the
// outcome of the one that took the delivery over.
func (w Webhooks) RecordOutcome(ctx context.Context, o webhooks.Outcome) error {
	_, err := w.s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = $3, lease = NULL,
			next_attempt_at = CASE WHEN $3 = 'pending' THEN now() + $4 * interval '1 microsecond' ELSE next_attempt_at END,
			last_status = NULLIF($5, 0), last_error = NULLIF($6, ''),
			finished_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END
		WHERE id = $1 AND lease = $2::uuid`,
		o.DeliveryID, o.Lease, o.Status, o.RetryAfter.Microseconds(), o.HTTPStatus, o.Error)
	if err != nil {
		return fmt.Errorf("record webhook delivery: %w", classify(err))
	}
	return nil
}

// OldestPending implements webhooks.Store.
func (w Webhooks) OldestPending(ctx context.Context) (time.Duration, error) {
	var age float64
	err := w.s.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)
		FROM webhook_deliveries WHERE status = 'pending'`).Scan(&age)
	if err != nil {
		return 0, classify(err)
	}
	return time.Duration(age * float64(time.Second)), nil
}

// PurgeDeliveries implements webhooks.Store.
func (w Webhooks) PurgeDeliveries(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := w.s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE status <> 'pending'
		AND finished_at < now() - $1 * interval '1 microsecond'`, age.Microseconds())
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}

package postgres

import (
	"context"
	"fmt"
	"time"
)

// PurgeFinished deletes up to batch confirmations that stopped being
// redeemable (finished, or expired unfinished) more than retention ago, and
// Stripe event ids older than a week (Stripe retries deliveries for three
// days). Audit events are kept, and so are executing confirmations (their
// outcome is still to be settled) and the changes made under a mandate
// still in force (what it spent is the sum of them: mandates.go). SKIP LOCKED lets several replicas purge at
// once without waiting on each other or on a second call holding a row.
func (s *Store) PurgeFinished(ctx context.Context, retention time.Duration, batch int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM confirmations WHERE id IN (
			SELECT id FROM confirmations
			WHERE coalesce(finished_at, expires_at) < now() - $1 * interval '1 microsecond'
				AND status <> 'executing' -- unsettled: kept until its outcome is known
				-- what a mandate still in force spent: kept while it is
				AND (mandate_id IS NULL OR NOT EXISTS (SELECT 1 FROM mandates m
					WHERE m.id = confirmations.mandate_id AND m.revoked_at IS NULL AND m.expires_at > now()))
			ORDER BY coalesce(finished_at, expires_at)
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, retention.Microseconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("purge confirmations: %w", classify(err))
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM stripe_events WHERE id IN (
			SELECT id FROM stripe_events WHERE received_at < now() - interval '7 days' LIMIT $1)`, batch); err != nil {
		return 0, fmt.Errorf("purge stripe events: %w", classify(err))
	}
	return tag.RowsAffected(), nil
}

// PurgeSignIns deletes up to batch expired sign-ins in progress, up to
// batch expired page sessions and up to batch counts of sign-in starts no
// longer read, and returns the largest of the counts: a caller purges until
// it is below batch. Anyone can start a sign-in, so these are purged in a
// loop of their own, never behind confirmations.
func (s *Store) PurgeSignIns(ctx context.Context, batch int) (int64, error) {
	logins, err := s.pool.Exec(ctx, `DELETE FROM web_logins WHERE state_hash IN (
			SELECT state_hash FROM web_logins WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, batch)
	if err != nil {
		return 0, fmt.Errorf("purge sign-ins: %w", classify(err))
	}
	sessions, err := s.pool.Exec(ctx, `DELETE FROM web_sessions WHERE id_hash IN (
			SELECT id_hash FROM web_sessions WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, batch)
	if err != nil {
		return 0, fmt.Errorf("purge sessions: %w", classify(err))
	}
	// A window's count of sign-in starts is read until the next window
	// ends (countStartSQL).
	starts, err := s.pool.Exec(ctx, `DELETE FROM sign_in_starts WHERE (bucket, window_start) IN (
			SELECT bucket, window_start FROM sign_in_starts WHERE window_end + (window_end - window_start) < now()
			LIMIT $1 FOR UPDATE SKIP LOCKED)`, batch)
	if err != nil {
		return 0, fmt.Errorf("purge sign-in counts: %w", classify(err))
	}
	return max(logins.RowsAffected(), sessions.RowsAffected(), starts.RowsAffected()), nil
}

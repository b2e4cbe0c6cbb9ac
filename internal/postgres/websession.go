package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/internal/websession"
)

// SaveLogin implements websession.Store. A start that its buckets' counts
// already refuse is refused by a read, which takes no lock: a flood beyond
// the limits does not queue on the counters. Any other is counted and
// stored in one transaction, where the counters' row locks make concurrent
// starts, on any replica, wait for each other, so a limit is never
// overshot; over a limit, nothing is counted or stored.
func (s *Store) SaveLogin(ctx context.Context, l websession.Login, limits websession.LoginLimits) error {
	err := s.saveLogin(ctx, l, limits)
	if _, limited := errors.AsType[*websession.LimitedError](err); limited {
		return err
	}
	if err != nil {
		return fmt.Errorf("save login: %w", classify(err))
	}
	return nil
}

func (s *Store) saveLogin(ctx context.Context, l websession.Login, limits websession.LoginLimits) error {
	buckets, err := s.loginBuckets(ctx, l, limits)
	if err != nil {
		return err
	}
	names, window := bucketNames(buckets), limits.Window.Microseconds()
	if err := overLimit(buckets)(s.pool.Query(ctx, peekStartsSQL, names, window)); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := overLimit(buckets)(tx.Query(ctx, countStartSQL, names, window)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO web_logins (state_hash, browser_hash, nonce, code_verifier, return_to, verify_id,
				client_addr, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8 * interval '1 microsecond')`,
			l.StateHash, l.BrowserHash, l.Nonce, l.CodeVerifier, l.ReturnTo, l.VerifyID, l.Client, l.TTL.Microseconds())
		return err
	})
}

// startBucket is one count a sign-in start is made in, and its limit.
type startBucket struct {
	name  string
	limit int
}

// loginBuckets are the counts l's start is made in: while the confirmation
// it is for waits for a person's sign-in (verification or approval), that
// confirmation's budget for l's client address, so that neither everyone's
// flood nor whoever else holds the confirmation's id (its agent does) can
// spend the person's; else its client address's and everyone's. A bucket
// without a limit is not counted.
func (s *Store) loginBuckets(ctx context.Context, l websession.Login, limits websession.LoginLimits) ([]startBucket, error) {
	if l.ForConfirmation != "" {
		var waiting bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM confirmations WHERE id = $1 AND status = 'pending'
				AND expires_at > now() AND (verify_required AND verified_at IS NULL OR approval = 'pending'))`,
			l.ForConfirmation).Scan(&waiting)
		if err != nil {
			return nil, err
		}
		if waiting {
			return withLimits(startBucket{"confirmation " + l.ForConfirmation + " address " + l.Client, limits.PerConfirmation}), nil
		}
	}
	return withLimits(startBucket{"address " + l.Client, limits.PerClient}, startBucket{"*", limits.Total}), nil
}

func withLimits(buckets ...startBucket) []startBucket {
	return slices.DeleteFunc(buckets, func(b startBucket) bool { return b.limit <= 0 })
}

func bucketNames(buckets []startBucket) []string {
	names := make([]string, len(buckets))
	for i, b := range buckets {
		names[i] = b.name
	}
	return names
}

// Starts are counted per bucket and fixed window ($2 microseconds long,
// from the epoch), and judged by a sliding window's estimate: this window's
// count, plus the previous window's in proportion to how much of it the
// last $2 microseconds still cover (fixed windows alone would let twice a
// limit through across a window's end). Both statements answer, for each
// bucket of $1, the estimate with this start and how long until this
// window ends.

// peekStartsSQL reads the estimates as they would be after one more start,
// without counting it.
const peekStartsSQL = `
SELECT b.name,
	coalesce(cur.starts, 0) + 1 + coalesce(prev.starts, 0) * extract(epoch FROM w.start + $2 * interval '1 microsecond' - now())::float8 / ($2::float8 / 1e6),
	w.start + $2 * interval '1 microsecond' - now()
FROM unnest($1::text[]) AS b(name)
	CROSS JOIN (SELECT date_bin($2 * interval '1 microsecond', now(), timestamptz 'epoch') AS start) AS w
	LEFT JOIN sign_in_starts cur ON cur.bucket = b.name AND cur.window_start = w.start
	LEFT JOIN sign_in_starts prev ON prev.bucket = b.name AND prev.window_end = w.start`

// countStartSQL counts the start in each bucket, in the order of $1, which
// is the order their rows are locked in.
const countStartSQL = `
WITH counted AS (
	INSERT INTO sign_in_starts (bucket, window_start, window_end, starts)
	SELECT b.name, w.start, w.start + $2 * interval '1 microsecond', 1
	FROM unnest($1::text[]) WITH ORDINALITY AS b(name, ord),
		(SELECT date_bin($2 * interval '1 microsecond', now(), timestamptz 'epoch') AS start) AS w
	ORDER BY b.ord
	ON CONFLICT (bucket, window_start) DO UPDATE SET starts = sign_in_starts.starts + 1
	RETURNING bucket, window_start, window_end, starts
)
SELECT c.bucket,
	c.starts + coalesce(p.starts, 0) * extract(epoch FROM c.window_end - now())::float8 / ($2::float8 / 1e6),
	c.window_end - now()
FROM counted c LEFT JOIN sign_in_starts p ON p.bucket = c.bucket AND p.window_end = c.window_start`

// overLimit reads the answer of peekStartsSQL or countStartSQL (it takes
// what Query returns) and returns a *websession.LimitedError when an
// estimate is over its bucket's limit.
func overLimit(buckets []startBucket) func(pgx.Rows, error) error {
	return func(rows pgx.Rows, err error) error {
		if err != nil {
			return err
		}
		limits := make(map[string]int, len(buckets))
		for _, b := range buckets {
			limits[b.name] = b.limit
		}
		var limited *websession.LimitedError
		var bucket string
		var estimate float64
		var left time.Duration
		_, err = pgx.ForEachRow(rows, []any{&bucket, &estimate, &left}, func() error {
			if estimate > float64(limits[bucket]) && limited == nil {
				limited = &websession.LimitedError{RetryAfter: max(left, time.Second)}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if limited != nil {
			return limited
		}
		return nil
	}
}

// TakeLogin implements websession.Store: one statement deletes and returns
// the login only when the browser's binding matches, so two callbacks with
// one state cannot both succeed, and a callback from another browser (an
// attacker who learnt the state) cannot cancel the sign-in.
func (s *Store) TakeLogin(ctx context.Context, stateHash, browserHash []byte) (websession.Login, error) {
	var l websession.Login
	var live bool
	err := s.pool.QueryRow(ctx, `DELETE FROM web_logins WHERE state_hash = $1 AND browser_hash = $2
		RETURNING state_hash, browser_hash, nonce, code_verifier, return_to, verify_id, created_at, expires_at > now()`,
		stateHash, browserHash).Scan(&l.StateHash, &l.BrowserHash, &l.Nonce, &l.CodeVerifier, &l.ReturnTo, &l.VerifyID, &l.CreatedAt, &live)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !live {
		return websession.Login{}, websession.ErrNotFound
	}
	if err != nil {
		return websession.Login{}, fmt.Errorf("take login: %w", classify(err))
	}
	return l, nil
}

// SaveSession implements websession.Store.
func (s *Store) SaveSession(ctx context.Context, ws websession.Session) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO web_sessions (id_hash, csrf_token, org, subject, client, scopes, auth_time, acr,
			verify_id, verify_auth_time, verify_acr, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		ws.IDHash, ws.CSRF, ws.Org, ws.Subject, ws.Client, ws.Scopes, nullTime(ws.AuthTime), ws.ACR,
		ws.VerifyID, nullTime(ws.VerifyAuthTime), ws.VerifyACR, ws.ExpiresAt)
	if err != nil {
		return fmt.Errorf("save session: %w", classify(err))
	}
	return nil
}

// Session implements websession.Store.
func (s *Store) Session(ctx context.Context, idHash []byte) (websession.Session, error) {
	ws := websession.Session{IDHash: idHash}
	err := s.pool.QueryRow(ctx, `SELECT csrf_token, org, subject, client, scopes, auth_time, acr,
			verify_id, verify_auth_time, verify_acr, expires_at
		FROM web_sessions WHERE id_hash = $1 AND expires_at > now()`, idHash).
		Scan(&ws.CSRF, &ws.Org, &ws.Subject, &ws.Client, &ws.Scopes, optionalTime{&ws.AuthTime}, &ws.ACR,
			&ws.VerifyID, optionalTime{&ws.VerifyAuthTime}, &ws.VerifyACR, &ws.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return websession.Session{}, websession.ErrNotFound
	}
	if err != nil {
		return websession.Session{}, fmt.Errorf("read session: %w", classify(err))
	}
	return ws, nil
}

// DeleteSession implements websession.Store.
func (s *Store) DeleteSession(ctx context.Context, idHash []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM web_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("delete session: %w", classify(err))
	}
	return nil
}

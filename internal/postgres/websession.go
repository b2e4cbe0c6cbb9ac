package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/internal/websession"
)

// saveLoginSQL inserts a sign-in only while the client's and everyone's
// sign-ins started within the window are under their limits (0: none), in
// one statement, and answers whether it did, with what a refusal's
// Retry-After needs. The rows counted are bounded by the limits themselves,
// and web_logins_created_idx finds them.
const saveLoginSQL = `
WITH recent AS (
	SELECT count(*) FILTER (WHERE client_addr = $8) AS mine, count(*) AS total,
		min(created_at) FILTER (WHERE client_addr = $8) AS mine_oldest, min(created_at) AS oldest
	FROM web_logins WHERE created_at > now() - $9 * interval '1 microsecond'
), saved AS (
	INSERT INTO web_logins (state_hash, browser_hash, nonce, code_verifier, return_to, verify_id, client_addr, expires_at)
	SELECT $1, $2, $3, $4, $5, $6, $8, now() + $7 * interval '1 microsecond' FROM recent
	WHERE ($10 = 0 OR mine < $10) AND ($11 = 0 OR total < $11)
	RETURNING 1
)
SELECT (SELECT count(*) FROM saved) = 1,
	coalesce(CASE WHEN mine >= $10 AND $10 > 0 THEN mine_oldest ELSE oldest END, now()) + $9 * interval '1 microsecond' - now()
FROM recent`

// SaveLogin implements websession.Store.
func (s *Store) SaveLogin(ctx context.Context, l websession.Login, limits websession.LoginLimits) error {
	var saved bool
	var wait time.Duration
	err := s.pool.QueryRow(ctx, saveLoginSQL, l.StateHash, l.BrowserHash, l.Nonce, l.CodeVerifier, l.ReturnTo, l.VerifyID,
		l.TTL.Microseconds(), l.Client, limits.Window.Microseconds(), limits.PerClient, limits.Total).
		Scan(&saved, &wait)
	if err != nil {
		return fmt.Errorf("save login: %w", classify(err))
	}
	if !saved {
		return &websession.LimitedError{RetryAfter: max(wait, time.Second)}
	}
	return nil
}

// TakeLogin implements websession.Store: one statement deletes and returns
// it, so two callbacks with one state cannot both succeed.
func (s *Store) TakeLogin(ctx context.Context, stateHash []byte) (websession.Login, error) {
	var l websession.Login
	var live bool
	err := s.pool.QueryRow(ctx, `DELETE FROM web_logins WHERE state_hash = $1
		RETURNING state_hash, browser_hash, nonce, code_verifier, return_to, verify_id, created_at, expires_at > now()`,
		stateHash).Scan(&l.StateHash, &l.BrowserHash, &l.Nonce, &l.CodeVerifier, &l.ReturnTo, &l.VerifyID, &l.CreatedAt, &live)
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

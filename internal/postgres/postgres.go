// Package postgres is billingd's PostgreSQL adapter: a pgx connection pool,
// the billing.Store implementation with hand-written SQL, and schema
// migrations with golang-migrate over the SQL embedded in package migrations.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/billing"
)

// PoolConfig tunes the connection pool.
type PoolConfig struct {
	// LockTimeout bounds how long a statement waits for a row lock. A second
	// call holds its confirmation's lock while Stripe answers, so this must
	// exceed the Stripe execution timeout.
	LockTimeout time.Duration
	// Tracer observes every query (benchmarks count round trips with it).
	Tracer pgx.QueryTracer
	// MaxConns, when not 0, is the pool's size whatever the URL says: the
	// executions pool is exactly as large as the executions it serves.
	// Otherwise the URL's pool_max_conns, or DefaultMaxConns.
	MaxConns int32
	// Name is the connections' application_name. "" is the one the URL
	// names (application_name=…, which tells an operator's replicas
	// apart), or else "billingd".
	Name string
	// Pool, when set, names one of the replica's pools after that name: the
	// executions pool's connections are "billingd executions".
	Pool string
}

// applicationName is what a pool's connections are called in
// pg_stat_activity (PoolConfig.Name, Pool); fromURL is the URL's own.
func applicationName(pc PoolConfig, fromURL string) string {
	name := cmp.Or(pc.Name, fromURL, "billingd")
	if pc.Pool != "" {
		name = PoolName(name, pc.Pool)
	}
	return name
}

// PoolName is the application_name of a replica's pool other than its
// main one: "billingd executions" for the replica billingd's executions.
func PoolName(replica, pool string) string { return replica + " " + pool }

// ReplicaBackends is a WHERE clause that picks one replica's backends in
// pg_stat_activity, in the current database: those named $1 (its main
// pool) or "$1 <pool>" (its other pools, applicationName). Tools that
// watch or fault a replica's connections use it, so that they match the
// names Open gives. starts_with, not LIKE: a name's "_" or "%" would be a
// wildcard there, and replica_2 would find replicaX2's pools.
const ReplicaBackends = `datname = current_database() AND (application_name = $1 OR starts_with(application_name, $1 || ' '))`

// DefaultMaxConns is the main pool's size when DATABASE_URL sets no
// pool_max_conns. pgx's own default, max(4, CPUs), is sized for work that
// keeps a CPU busy; billingd's connections mostly wait for round trips
// (first calls, reads, webhooks, the reconciler; executions have a pool of
// their own), and make bench measured 16 ahead of 4 (docs/performance.md).
const DefaultMaxConns = 16

// Open connects a pool to the database at url and checks that it answers.
// Pool size and other pgx settings can be set in the URL (pool_max_conns=…).
func Open(ctx context.Context, url string, pc PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	switch {
	case pc.MaxConns > 0:
		cfg.MaxConns = pc.MaxConns
	case !strings.Contains(url, "pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	if pc.LockTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(pc.LockTimeout.Milliseconds())
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName(pc, cfg.ConnConfig.RuntimeParams["application_name"])
	if pc.Tracer != nil {
		cfg.ConnConfig.Tracer = pc.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", classify(err))
	}
	return pool, nil
}

// classify marks errors that mean "the database could not be reached or
// gave no answer" with billing.ErrUnavailable: the caller may retry.
func classify(err error) error {
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", billing.ErrUnavailable, err)
	}
	return err
}

// isLockNotAvailable: a NOWAIT lock found its row locked (55P03).
func isLockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, cannot connect now
			return true
		case pgErr.Code == "53300", pgErr.Code == "55P03", pgErr.Code == "40001", pgErr.Code == "40P01":
			// too many connections, lock timeout, serialization failure, deadlock
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

package main

import (
	"context"
	"slices"
	"testing"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The bench's own backends are on neither side: while its pool was named
// billingd, every poll of pg_stat_activity counted the polling backend as
// one of billingd's, with its CPU and wake-ups.
func TestSidesLeaveTheBenchOut(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDatabase(t)
	pool, err := openBenchPool(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	bench, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Release()
	benchPid := int(bench.Conn().PgConn().PID())
	main, executions := connectAs(t, db.URL, "billingd"), connectAs(t, db.URL, "billingd executions")
	stranger := connectAs(t, db.URL, "billingdx")
	elsewhere := connectAs(t, testenv.NewDatabase(t).URL, "billingd") // another billingd on a shared server

	pids, err := sidePids(ctx, bench, "billingd")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pids, benchPid) {
		t.Errorf("billingd's side %v holds the bench's own backend %d", pids, benchPid)
	}
	for _, c := range []*pgx.Conn{main, executions} {
		if pid := int(c.PgConn().PID()); !slices.Contains(pids, pid) {
			t.Errorf("billingd's side %v misses %q's backend %d", pids, c.Config().RuntimeParams["application_name"], pid)
		}
	}
	if pid := int(stranger.PgConn().PID()); slices.Contains(pids, pid) {
		t.Errorf("billingd's side %v holds billingdx's backend %d", pids, pid)
	}
	if pid := int(elsewhere.PgConn().PID()); slices.Contains(pids, pid) {
		t.Errorf("billingd's side %v holds a backend %d in another database", pids, pid)
	}
}

// The URLs the bench hands billingd and pgbench name their side, whatever
// name BENCH_DATABASE_URL carries.
func TestWithApplicationName(t *testing.T) {
	got := withApplicationName("postgres://u@h:5432/db?application_name=ops&sslmode=disable", pgbenchApplicationName)
	cfg, err := pgx.ParseConfig(got)
	if err != nil {
		t.Fatal(err)
	}
	if name := cfg.RuntimeParams["application_name"]; name != "pgbench" || cfg.Database != "db" {
		t.Errorf("%s: application_name %q, database %q", got, name, cfg.Database)
	}
}

func connectAs(t *testing.T, dbURL, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The URLs the bench rewrites keep what PostgreSQL's URI syntax encodes:
// a space is %20, not "+" (which libpq and pgx read as a plus).
func TestURLRewritesKeepSpaces(t *testing.T) {
	in := "postgres://u:p@h:5432/db?options=-c%20statement_timeout%3D0&sslmode=disable"
	for _, got := range []string{withApplicationName(in, "pgbench"), withPoolSize(in, 4, true)} {
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Fatal(err)
		}
		if opts := cfg.RuntimeParams["options"]; opts != "-c statement_timeout=0" {
			t.Errorf("%s: options %q", got, opts)
		}
	}
}

// The connection peaks tell the executions pool's held connections from
// the main pool's by the name internal/app gives that pool, not by a copy
// of it.
func TestConnectionCountsFindTheExecutionsPool(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDatabase(t)
	cfg := config.Config{DatabaseURL: withApplicationName(db.URL, billingdApplicationName)}
	mainPool, err := app.OpenDatabase(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mainPool.Close()
	executions, err := app.OpenExecutions(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer executions.Close()
	bench, err := openBenchPool(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()

	// Two transactions open in the main pool and one in the executions
	// pool, and one idle connection in the main pool.
	for _, pool := range []*pgxpool.Pool{mainPool, mainPool, executions} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	idle, err := mainPool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	idle.Release()

	got, err := countConnections(ctx, bench)
	if err != nil {
		t.Fatal(err)
	}
	if want := (connPeaks{held: 3, heldExecutions: 1, open: 4}); got != want {
		t.Errorf("countConnections = %+v, want %+v", got, want)
	}
}

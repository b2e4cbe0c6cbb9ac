package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/billingd/billingd/internal/devenv"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/migrations"
)

var server struct {
	once sync.Once
	url  string // admin URL of the server (any database)
	err  error
}

// serverURL is TEST_DATABASE_URL, or a PostgreSQL started once per test
// process with testcontainers when Docker is available.
func serverURL() (string, error) {
	server.once.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			server.url = u
			return
		}
		server.url, server.err = startContainer()
	})
	return server.url, server.err
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2)))
	if err != nil {
		return "", fmt.Errorf("start PostgreSQL with testcontainers: %w", err)
	}
	// The container lives as long as the test process; Ryuk removes it after.
	return c.ConnectionString(ctx, "sslmode=disable")
}

// Database is a fresh, migrated database owned by one test.
type Database struct {
	URL  string
	Pool *pgxpool.Pool
}

// NewDatabase creates a database for t from the migrated template and drops
// it when t ends.
func NewDatabase(t testing.TB) *Database {
	t.Helper()
	admin, err := serverURL()
	if err != nil {
		missing(t, "no PostgreSQL for integration tests: set TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres) or run Docker: %v", err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		missing(t, "cannot connect to TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(ctx)
	template, err := ensureTemplate(ctx, conn, admin)
	if err != nil {
		t.Fatalf("prepare template database: %v", err)
	}
	name := "billingd_test_" + randomHex(6)
	if err := createFrom(ctx, conn, name, template); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(admin, name) })
	dbURL := withDatabase(admin, name)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return &Database{URL: dbURL, Pool: pool}
}

// ensureTemplate creates (once per schema, across concurrently running test
// processes) a template database with every migration applied. Its name
// carries a hash of the migrations, so a changed schema gets a new template.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin string) (string, error) {
	name := "billingd_template_" + migrationsHash()
	// Test packages run in parallel processes: serialise template creation.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(727274)`); err != nil {
		return "", err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(727274)`)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{building}.Sanitize()+` WITH (FORCE)`)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", err
	}
	m, err := postgres.NewMigrator(withDatabase(admin, building))
	if err != nil {
		return "", err
	}
	err = m.Up()
	m.Close()
	if err != nil {
		return "", err
	}
	// Renamed only when complete, so a crashed run never leaves a half template.
	_, err = conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{building}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize())
	return name, err
}

// createFrom copies the template, retrying while another session is still
// leaving it (PostgreSQL refuses to copy a database with sessions).
func createFrom(ctx context.Context, conn *pgx.Conn, name, template string) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{template}.Sanitize())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func dropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
}

func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.Path = "/" + name
	if u.RawQuery == "" {
		// libpq's and pgx's default, spelled out so that tests can append
		// "&key=value" to a URL whose TEST_DATABASE_URL had no query.
		u.RawQuery = "sslmode=prefer"
	}
	return u.String()
}

func migrationsHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, _ := fs.ReadFile(migrations.FS, path)
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
		h.Write(data)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PrivateDatabase starts a PostgreSQL cluster of t's own (the private
// cluster billingd dev runs, in a directory of t's), migrates its database
// and stops it when t ends: for a test that restarts PostgreSQL, which it
// may not do to a server other tests share. The cluster's binaries are
// required (initdb, postgres: Debian's postgresql package).
func PrivateDatabase(t testing.TB) (*Database, *devenv.Postgres) {
	t.Helper()
	ctx := context.Background()
	pg, err := devenv.StartPostgres(ctx, t.TempDir(), "billingd")
	if err != nil {
		missing(t, "no private PostgreSQL cluster: %v", err)
	}
	t.Cleanup(func() { _ = pg.Remove() })
	m, err := postgres.NewMigrator(pg.URL())
	if err != nil {
		t.Fatalf("migrate the private cluster: %v", err)
	}
	err = m.Up()
	m.Close()
	if err != nil {
		t.Fatalf("migrate the private cluster: %v", err)
	}
	pool, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		t.Fatalf("open the private cluster: %v", err)
	}
	t.Cleanup(pool.Close)
	return &Database{URL: pg.URL(), Pool: pool}, pg
}

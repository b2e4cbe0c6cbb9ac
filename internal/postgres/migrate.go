package postgres

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/billingd/billingd/migrations"
)

// Migrator applies the embedded schema migrations.
type Migrator struct {
	m *migrate.Migrate
}

// NewMigrator opens a migrator on the database at databaseURL (postgres://
// or postgresql://).
func NewMigrator(databaseURL string) (*Migrator, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL(databaseURL))
	if err != nil {
		return nil, fmt.Errorf("open migrator: %w", classify(err))
	}
	return &Migrator{m: m}, nil
}

// migrateURL rewrites the scheme for golang-migrate's pgx v5 driver, which
// registers itself as pgx5:// (a postgres:// URL gives "unknown driver"), and
// drops pgxpool's settings (pool_max_conns, …): the driver would send them
// to PostgreSQL as run-time parameters, which PostgreSQL refuses.
func migrateURL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return databaseURL
	}
	u.Scheme = "pgx5"
	q := u.Query()
	for name := range q {
		if strings.HasPrefix(name, "pool_") {
			q.Del(name)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Up applies every pending migration.
func (mg *Migrator) Up() error {
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down reverts the last n migrations.
func (mg *Migrator) Down(n int) error {
	if n < 1 {
		return fmt.Errorf("migrate down: the number of migrations to revert must be at least 1")
	}
	if err := mg.m.Steps(-n); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// Version returns the applied version (0 when none) and whether a failed
// migration left the schema dirty.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	version, dirty, err = mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// Close releases the migrator's connections.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr)
}

// LatestVersion is the newest migration embedded in the binary.
func LatestVersion() (uint, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return 0, err
	}
	var latest uint
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && strings.HasSuffix(e.Name(), ".up.sql") && v > latest {
			latest = v
		}
	}
	return latest, nil
}

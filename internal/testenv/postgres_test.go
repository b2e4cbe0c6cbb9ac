package testenv

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Tests append "&key=value" to Database.URL; that must work whether
// TEST_DATABASE_URL has a query (make test's) or none (the form the
// missing-database hint gives).
func TestDatabaseURLTakesAppendedParameters(t *testing.T) {
	for _, server := range []string{
		"postgres://postgres@127.0.0.1:5432/postgres",
		"postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable",
	} {
		cfg, err := pgxpool.ParseConfig(withDatabase(server, "billingd_test_x") + "&pool_max_conns=3")
		if err != nil {
			t.Fatalf("%s: %v", server, err)
		}
		if db := cfg.ConnConfig.Database; db != "billingd_test_x" || cfg.MaxConns != 3 {
			t.Errorf("%s: database %q, pool_max_conns %d", server, db, cfg.MaxConns)
		}
	}
}

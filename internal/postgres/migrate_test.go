package postgres

import "testing"

func TestMigrateURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5432/db":                           "pgx5://u:p@h:5432/db",
		"postgresql://h/db?sslmode=disable":                  "pgx5://h/db?sslmode=disable",
		"postgres://h/db?pool_max_conns=16&sslmode=disable":  "pgx5://h/db?sslmode=disable",
		"postgres://h/db?pool_max_conns=16&pool_min_conns=2": "pgx5://h/db",
		"host=/var/run/postgresql dbname=billingd":           "host=/var/run/postgresql dbname=billingd",
	} {
		if got := migrateURL(in); got != want {
			t.Errorf("migrateURL(%q) = %q, want %q", in, got, want)
		}
	}
}

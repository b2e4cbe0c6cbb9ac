package postgres_test

import (
	"context"
	"testing"

	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
)

// An operator names a replica's connections in DATABASE_URL
// (application_name=…) and finds both its pools under that name; the
// integration sweep's "connections terminated" fault finds them so too.
// Open used to overwrite the URL's name with "billingd".
func TestOpenKeepsTheURLsApplicationName(t *testing.T) {
	t.Setenv("PGAPPNAME", "") // pgx's default for a URL with no application_name
	db := testenv.NewDatabase(t)
	for _, c := range []struct {
		url  string
		pc   postgres.PoolConfig
		want string
	}{
		{db.URL, postgres.PoolConfig{}, "billingd"},
		{db.URL, postgres.PoolConfig{Pool: "executions"}, "billingd executions"},
		{db.URL + "&application_name=replica-2", postgres.PoolConfig{}, "replica-2"},
		{db.URL + "&application_name=replica-2", postgres.PoolConfig{Pool: "executions"}, "replica-2 executions"},
		{db.URL + "&application_name=replica-2", postgres.PoolConfig{Name: "billingd-bench"}, "billingd-bench"},
	} {
		pool, err := postgres.Open(context.Background(), c.url, c.pc)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(context.Background(), `SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&got)
		pool.Close()
		if err != nil || got != c.want {
			t.Errorf("%+v on %s: application_name %q (%v), want %q", c.pc, c.url[len(db.URL):], got, err, c.want)
		}
	}
}

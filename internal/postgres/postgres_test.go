package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

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

// ReplicaBackends finds both of a replica's pools by the names Open gives
// them, and no other replica whose name merely starts with the same
// letters or matches it as a LIKE pattern.
func TestReplicaBackendsFindsBothPools(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDatabase(t)
	pid := func(pc postgres.PoolConfig, url string) int32 {
		pool, err := postgres.Open(ctx, url, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c, err := pool.Acquire(ctx) // held until the test ends, so its backend stays
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release)
		return int32(c.Conn().PgConn().PID())
	}
	replica := db.URL + "&application_name=replica_2"
	want := []int32{pid(postgres.PoolConfig{}, replica), pid(postgres.PoolConfig{Pool: "executions"}, replica)}
	pid(postgres.PoolConfig{}, db.URL+"&application_name=replica_20")
	pid(postgres.PoolConfig{Name: "replica_2x"}, db.URL)
	pid(postgres.PoolConfig{Name: "replicaX2", Pool: "executions"}, db.URL) // "_" is no wildcard

	rows, err := db.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE `+postgres.ReplicaBackends+` ORDER BY pid`, "replica_2")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("replica_2's backends: %v (%v), want %v", got, err, want)
	}
}

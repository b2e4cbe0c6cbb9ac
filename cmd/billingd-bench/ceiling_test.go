package main

import (
	"os"
	"strings"
	"testing"
)

// TestParseFsyncRate reads a real pg_test_fsync run (PostgreSQL 15, -s 1,
// on this project's kind of machine).
func TestParseFsyncRate(t *testing.T) {
	out, err := os.ReadFile("testdata/pg_test_fsync-15.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		want   float64
		errSub string
	}{
		{"fdatasync", 3293.788, ""},
		{"open_datasync", 2541.509, ""},
		// The two-write section has fsync at 3989.717: the one-write line is read.
		{"fsync", 1117.924, ""},
		{"fsync_writethrough", 0, "not available"},
		{"wal_sync_fast", 0, "no line for wal_sync_method wal_sync_fast"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			got, err := parseFsyncRate(string(out), tc.method)
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSub) {
					t.Errorf("err = %v, want one saying %q", err, tc.errSub)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseFsyncRate(%s) = %v, %v; want %v", tc.method, got, err, tc.want)
			}
		})
	}
	if _, err := parseFsyncRate("pg_test_fsync: could not open output file", "fdatasync"); err == nil {
		t.Error("parseFsyncRate of an error message succeeded")
	}
}

// TestFlushingCommits counts the commits that wait for the WAL flush in
// the exchanges billingd's calls make (as the round-trip tracer records
// them, shortened).
func TestFlushingCommits(t *testing.T) {
	batch := func(sqls ...string) exchange { return exchange{kind: "batch", statements: sqls} }
	query := func(sql string) exchange { return exchange{kind: "query", statements: []string{sql}} }
	for _, tc := range []struct {
		name      string
		exchanges []exchange
		want      int
	}{
		{"first call: a read, then one implicit transaction that locks and inserts", []exchange{
			batch("SELECT count(*) FILTER (WHERE event <> 'TOKEN_REJECTED') FROM audit_events", "SELECT o.id, o.name FROM orgs o"),
			batch("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "SELECT 1 FROM subscriptions WHERE org = $1 FOR SHARE",
				"WITH quotable AS (SELECT 1) INSERT INTO confirmations (id) SELECT $1 FROM quotable RETURNING created_at"),
		}, 1},
		{"second call: the recovery point's commit and the record's", []exchange{
			batch("begin", "SELECT count(*) FROM audit_events", "SELECT 1 FROM subscriptions s WHERE s.org = $1 FOR UPDATE", "SELECT c.id FROM confirmations c"),
			batch("UPDATE confirmations SET status = 'executing' WHERE id = $1", "INSERT INTO audit_events (event) VALUES ($1)", "commit",
				"begin", "SELECT 1 FROM subscriptions s JOIN confirmations c ON c.org = s.org WHERE c.id = $1 FOR UPDATE OF s"),
			batch("UPDATE confirmations SET status = $1", "UPDATE subscriptions SET plan = $1", "INSERT INTO receipts (x) VALUES ($1)", "COMMIT"),
		}, 2},
		{"a transaction that only locked rows still commits with an id", []exchange{
			query("BEGIN"), query("SELECT 1 FROM subscriptions WHERE org = $1 FOR NO KEY UPDATE"), query("COMMIT"),
		}, 1},
		{"reads commit nothing to flush; a prepare is no statement", []exchange{
			{kind: "prepare", statements: []string{"INSERT INTO x VALUES ($1)"}},
			query("SELECT plan FROM subscriptions WHERE org = $1"), query("BEGIN"), query("SELECT 1"), query("COMMIT"),
		}, 0},
		{"a rolled-back write flushes nothing", []exchange{
			query("BEGIN"), query("DELETE FROM confirmations WHERE id = $1"), query("ROLLBACK"),
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := flushingCommits(tc.exchanges); got != tc.want {
				t.Errorf("flushingCommits = %d, want %d", got, tc.want)
			}
		})
	}
}

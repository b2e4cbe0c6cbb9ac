package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/billingd/billingd/internal/devenv"
)

// privateServerSettings are what make bench's own PostgreSQL runs with
// besides the stock settings (fsync on, 128 MB of shared buffers): every
// run gets PostgreSQL's time per statement (statements.go) and room for
// billingd's pools and pgbench's connections at once.
var privateServerSettings = []string{
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.track_planning=on",
	"max_connections=200",
}

// startServer runs a PostgreSQL cluster of the bench's own, the one
// billingd dev makes (internal/devenv), unless BENCH_DATABASE_URL names a
// server: then the bench uses that one as it is. A private cluster starts
// with the same settings on every machine and nothing else in it, and is
// removed when the bench ends.
func (e *env) startServer(ctx context.Context) error {
	if e.opts.serverURL != "" {
		e.log.Printf("PostgreSQL: BENCH_DATABASE_URL's server")
		return nil
	}
	dir := filepath.Join(e.tmp, "postgres")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	pg, err := devenv.StartPostgres(ctx, dir, "bench", privateServerSettings...)
	if err != nil {
		return err
	}
	e.cleanup(func() { _ = pg.Remove() })
	e.opts.serverURL, e.privateServer, e.postmaster = pg.URL(), true, pg.Pid()
	e.log.Printf("PostgreSQL: a private cluster with %v", privateServerSettings)
	return nil
}

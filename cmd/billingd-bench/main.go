// Command billingd-bench measures billingd against the database's own ceiling
// on one machine, in one run (make bench).
//
// It creates a dedicated database, builds and starts the real `billingd
// serve` binary against it, serves a Stripe stand-in and a JWKS token issuer
// from this process on loopback, seeds orgs through the billing service, and
// then drives the REST handshake with real signed JWTs:
//
//   - first calls only (propose) and full handshakes (propose, then confirm)
//     at several concurrencies, each against pgbench running scripts/ — the
//     same SQL billingd executes per call — at the same concurrency up to
//     billingd's main pool (mirrorConnections), the two
//     alternating for -rounds rounds each (rounds.go), reported as medians
//     with their spread;
//   - propose and handshake again with 0, 1 million and 5 million old
//     (finished) confirmation rows in the table;
//   - a sample of calls through an in-process billingd with a pgx tracer that
//     counts database round trips per call;
//   - the peak RSS of the billingd process;
//   - once, at the start, the disk's WAL flushes per second with
//     pg_test_fsync: the ceiling of one client's commits (ceiling.go).
//
// It also measures where the CPU goes (billingd, this process, the
// PostgreSQL backends, pgbench): on a small machine all of them share the
// cores, and the ratios follow from CPU per operation.
//
// Results are printed and written as a markdown file (RESULTS.md next to this
// file), and optionally into docs/performance.md between the bench markers
// (make bench does both). Nothing is asserted: the targets are reported as
// met or missed with their numbers.
//
// The database server comes from BENCH_DATABASE_URL (default: the local
// PostgreSQL on 127.0.0.1:5432, user postgres); the bench database on it is
// dropped and recreated, and an advisory lock keeps a second bench off the
// server. -stripe=mock runs against stripe-mock instead of the in-process
// stand-in; -h lists the other flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "billingd-bench:", err)
		os.Exit(1)
	}
}

// run parses the command line, sets up the environment, runs every phase
// and writes the report.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(stdout)
	env, err := setUp(ctx, opts, log)
	if err != nil {
		return err
	}
	defer env.tearDown()
	res, err := runPhases(ctx, env)
	if err != nil {
		return err
	}
	return writeReport(opts, res, log)
}

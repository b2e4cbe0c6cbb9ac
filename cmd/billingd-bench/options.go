package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// defaultServerURL is the local PostgreSQL the project's other tools use.
const defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// options is the bench's configuration, read once from flags and the
// environment.
type options struct {
	serverURL    string // BENCH_DATABASE_URL: any database on the server
	dbName       string
	stripe       string // canned, fake or mock
	orgs         int
	principals   int
	clients      []int
	dataClients  int
	oldRows      []int
	warmup       time.Duration
	duration     time.Duration
	poolMaxConns int
	out          string
	doc          string
	keep         bool
	pin          bool
	args         []string // the flags that change what is measured, for the report
}

// Stripe stand-ins: canned answers (fastest), the stateful in-process fake
// (internal/stripepay/stripepaytest), or stripe-mock (the real wire format, slowest).
const (
	stripeCanned = "canned"
	stripeFake   = "fake"
	stripeMock   = "mock"
)

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("billingd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{serverURL: getenv("BENCH_DATABASE_URL")}
	if o.serverURL == "" {
		o.serverURL = defaultServerURL
	}
	fs.StringVar(&o.dbName, "db", "billingd_bench", "bench database, dropped and recreated on the BENCH_DATABASE_URL server")
	fs.StringVar(&o.stripe, "stripe", stripeCanned, "Stripe stand-in: canned, fake (internal/stripepay/stripepaytest) or mock (stripe-mock)")
	fs.IntVar(&o.orgs, "orgs", 1000, "orgs to seed")
	fs.IntVar(&o.principals, "principals", 20, "principals (JWT subjects) per org, at most 99; enough that none reaches billingd's rate limit")
	clients := fs.String("clients", "1,4,16,64", "concurrent clients for the throughput rows")
	fs.IntVar(&o.dataClients, "data-clients", 16, "concurrent clients for the old-rows rows")
	oldRows := fs.String("old-rows", "0,1000000,5000000", "old confirmation rows for the data-size rows, ascending")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up at the start of each run")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "measured time of each run")
	// pgx's default pool, max(4, cores), is 4 connections here; 16 gives
	// billingd as many as pgbench gets at the 16-client rows, and measured
	// 7–10% more handshakes per second at 16 clients (more commits share a
	// WAL flush), first calls within noise.
	fs.IntVar(&o.poolMaxConns, "pool-max-conns", 16, "pool_max_conns for billingd's DATABASE_URL (0: pgx's default)")
	fs.StringVar(&o.out, "out", "", "write the results as markdown to this file")
	fs.StringVar(&o.doc, "doc", "", "also replace the results between the bench markers in this page (make bench: docs/performance.md)")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench database afterwards")
	fs.BoolVar(&o.pin, "pin", false, "give PostgreSQL half the CPUs and billingd, the load generator and pgbench the rest (taskset; a local server, root or its user)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "out" && f.Name != "doc" {
			o.args = append(o.args, "-"+f.Name+"="+f.Value.String())
		}
	})
	var err error
	if o.clients, err = intList(*clients); err != nil {
		return options{}, fmt.Errorf("-clients: %w", err)
	}
	if o.oldRows, err = intList(*oldRows); err != nil {
		return options{}, fmt.Errorf("-old-rows: %w", err)
	}
	return o, o.check()
}

func (o options) check() error {
	switch {
	case o.stripe != stripeCanned && o.stripe != stripeFake && o.stripe != stripeMock:
		return fmt.Errorf("-stripe: want canned, fake or mock, got %q", o.stripe)
	case o.principals < 1 || o.principals > 99:
		// Principal ids are org*100+k (see seed.go): k must fit two digits.
		return errors.New("-principals: want 1–99")
	case o.orgs < maxClients(o):
		return errors.New("-orgs: want at least one org per client")
	case o.duration < time.Second:
		return errors.New("-duration: want at least 1s")
	}
	for i := 1; i < len(o.oldRows); i++ {
		if o.oldRows[i] < o.oldRows[i-1] {
			return errors.New("-old-rows: want ascending counts (rows are only added)")
		}
	}
	return nil
}

// maxClients is the largest number of concurrent clients of any run.
func maxClients(o options) int {
	m := o.dataClients
	for _, c := range o.clients {
		m = max(m, c)
	}
	return m
}

func intList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("want comma-separated non-negative integers, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

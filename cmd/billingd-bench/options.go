package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/billingd/billingd/internal/postgres"
)

// options is the bench's configuration, read once from flags and the
// environment.
type options struct {
	serverURL    string // BENCH_DATABASE_URL: any database on the server; "": a private cluster (server.go)
	dbName       string
	stripe       string // canned, fake or mock
	orgs         int
	principals   int
	clients      []int
	dataClients  int
	oldRows      []int
	warmup       time.Duration
	duration     time.Duration
	rounds       int // runs of each side per row, alternating (rounds.go)
	fsyncSeconds int // pg_test_fsync's -s (ceiling.go); 0: no ceiling
	poolMaxConns int
	billingdEnv  []string // KEY=VALUE pairs added to billingd's environment
	out          string
	doc          string
	keep         bool
	pin          bool
	mirrorGap    time.Duration // pgbench's \sleep after each round trip of the mirror (withGaps)
	args         []string      // the flags that change what is measured, for the report
	// At Stripe's pace (latency.go): the rows' clients, the stand-in's
	// latencies, and each row's warm-up and measured time.
	latencyClients   []int
	latencyPreview   time.Duration
	latencyUpdate    time.Duration
	latencyRead      time.Duration
	latencyTail      time.Duration
	latencyTailShare float64
	latencyWarmup    time.Duration
	latencyDuration  time.Duration
	latencyOnly      bool
	latencyOneOrg    int // clients of issue 39's row (latency.go); 0: none
	// profile (-profile DIR): a CPU profile of billingd (PPROF) and of
	// this process over each measured billingd run at profileClients.
	profile        string
	profileClients int
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
	fs.StringVar(&o.dbName, "db", "billingd_bench", "bench database, dropped and recreated on the BENCH_DATABASE_URL server")
	fs.StringVar(&o.stripe, "stripe", stripeCanned, "Stripe stand-in: canned, fake (internal/stripepay/stripepaytest) or mock (stripe-mock)")
	fs.IntVar(&o.orgs, "orgs", 1000, "orgs to seed")
	fs.IntVar(&o.principals, "principals", 20, "principals (JWT subjects) per org, at most 99; enough that none reaches billingd's rate limit")
	clients := fs.String("clients", "1,4,16,64", "concurrent clients for the throughput rows")
	fs.IntVar(&o.dataClients, "data-clients", 16, "concurrent clients for the old-rows rows")
	oldRows := fs.String("old-rows", "0,1000000,5000000", "old confirmation rows for the data-size rows, ascending (\"\": no data-size rows)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up at the start of each run")
	// Five rounds of each side at 3 s (plus warm-up and the settles
	// between runs) make a row take about a minute, and make bench about
	// 25 minutes on a slow 2-core machine (docs/performance.md). With three,
	// two runs on an AMD EPYC VM whose runs of pgbench alone moved by up to
	// 50% from one to the next disagreed by 13 and 14 points on two ratios:
	// one odd run of either side moves a median of three, not one of five.
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of each run (each round of each side)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per row: billingd and the pgbench mirror run alternately, this many times each; the report gives medians and spreads")
	fs.IntVar(&o.fsyncSeconds, "fsync-seconds", 1, "seconds per test of pg_test_fsync, run once at the start for the disk's commit ceiling (0: skip)")
	// billingd's default main pool is 16 connections (pgx's own, max(4,
	// cores), is 4 here; 16 measured 7–10% more handshakes per second at 16
	// clients), and its executions pool CONFIRM_CONCURRENCY: the bench runs
	// billingd's defaults.
	fs.IntVar(&o.poolMaxConns, "pool-max-conns", 0, "pool_max_conns for billingd's DATABASE_URL (0: billingd's default)")
	fs.Var((*envFlag)(&o.billingdEnv), "billingd-env", "KEY=VALUE added to billingd's environment, to measure a setting (e.g. GOMAXPROCS=1); repeat for more; not the settings the bench sets itself")
	latencyClients := fs.String("latency-clients", "8,32,128", "concurrent clients for the rows at Stripe's pace (\"\": none)")
	fs.DurationVar(&o.latencyPreview, "latency-preview", 150*time.Millisecond, "Stripe's latency for an invoice preview")
	fs.DurationVar(&o.latencyUpdate, "latency-update", 300*time.Millisecond, "Stripe's latency for a subscription update with an invoice")
	fs.DurationVar(&o.latencyRead, "latency-read", 100*time.Millisecond, "Stripe's latency for reading a subscription")
	fs.DurationVar(&o.latencyTail, "latency-tail", 2*time.Second, "the latency of the updates in the tail")
	fs.Float64Var(&o.latencyTailShare, "latency-tail-share", 0.01, "the share of updates in the tail")
	fs.DurationVar(&o.latencyWarmup, "latency-warmup", 2*time.Second, "unmeasured warm-up of each row at Stripe's pace")
	fs.DurationVar(&o.latencyDuration, "latency-duration", 15*time.Second, "measured time of each row at Stripe's pace")
	fs.IntVar(&o.latencyOneOrg, "latency-one-org", 32, "clients of the row at Stripe's pace with one org per client, no tail and reads at loopback speed (0: none)")
	fs.BoolVar(&o.latencyOnly, "latency-only", false, "run only the rows at Stripe's pace (no pgbench rows, old rows or round trips)")
	fs.StringVar(&o.profile, "profile", "", "write CPU profiles of billingd (served by PPROF on its metrics listener) and of the bench process over each billingd run at -profile-clients to this directory (those runs' CPU and allocation include the profilers')")
	fs.IntVar(&o.profileClients, "profile-clients", 16, "the concurrency whose runs -profile profiles")
	fs.StringVar(&o.out, "out", "", "write the results as markdown to this file")
	fs.StringVar(&o.doc, "doc", "", "also replace the results between the bench markers in this page (make bench: docs/performance.md)")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench database afterwards")
	fs.DurationVar(&o.mirrorGap, "mirror-gap", 0, "make pgbench wait this long after each of the mirror's round trips, as billingd works between its statements (0: back to back, the database's ceiling); "+
		"to compare what the same statements cost PostgreSQL after an idle gap, not for the ratios")
	fs.BoolVar(&o.pin, "pin", false, "give PostgreSQL half the CPUs and billingd, the load generator and pgbench the rest (taskset; a local server, root or its user)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "out", "doc", "profile":
		case "billingd-env": // repeated: each as given
			for _, kv := range o.billingdEnv {
				o.args = append(o.args, "-billingd-env="+kv)
			}
		default:
			o.args = append(o.args, "-"+f.Name+"="+f.Value.String())
		}
	})
	if o.mirrorGap > 0 && o.doc != "" {
		return options{}, errors.New("-mirror-gap: its mirror is no ceiling, so its results must not replace the published ones in -doc; run it with -out only (go run ./cmd/billingd-bench -mirror-gap=… -out FILE)")
	}
	var err error
	if o.clients, err = intList(*clients); err != nil {
		return options{}, fmt.Errorf("-clients: %w", err)
	}
	if *oldRows != "" {
		if o.oldRows, err = intList(*oldRows); err != nil {
			return options{}, fmt.Errorf("-old-rows: %w", err)
		}
	}
	if *latencyClients != "" {
		if o.latencyClients, err = intList(*latencyClients); err != nil {
			return options{}, fmt.Errorf("-latency-clients: %w", err)
		}
	}
	return o, o.check()
}

// envFlag is -billingd-env: each use adds one KEY=VALUE (a value may hold
// commas, as GODEBUG's do).
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }

func (e *envFlag) Set(kv string) error {
	k, _, ok := strings.Cut(kv, "=")
	switch {
	case !ok || k == "" || strings.ContainsAny(k, " \t"):
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	case slices.Contains(benchSettings, k):
		return fmt.Errorf("%s is set by the bench itself", k)
	}
	*e = append(*e, kv)
	return nil
}

// benchSettings are the environment variables the bench gives billingd
// itself (billingdEnv, startBillingd): -billingd-env may not change them,
// or billingd and the bench's in-process services would disagree.
var benchSettings = []string{"DATABASE_URL", "LISTEN_ADDR", "METRICS_ADDR", "PPROF", "STRIPE_SECRET_KEY", "STRIPE_API_BASE",
	"OAUTH_ISSUER", "PURGE_RETENTION", "MIGRATE_ON_START", "LOG_FORMAT", "PATH", "HOME"}

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
	case o.rounds < 1:
		return errors.New("-rounds: want at least 1")
	case o.fsyncSeconds < 0:
		return errors.New("-fsync-seconds: want 0 or more")
	case o.latencyDuration < time.Second:
		return errors.New("-latency-duration: want at least 1s")
	case o.latencyTailShare < 0 || o.latencyTailShare > 1:
		return errors.New("-latency-tail-share: want 0–1")
	case o.latencyOnly && len(o.latencyClients) == 0 && o.latencyOneOrg == 0:
		return errors.New("-latency-only: want -latency-clients")
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
	for _, c := range append(slices.Clone(o.clients), append(o.latencyClients, o.latencyOneOrg)...) {
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

// mainPool is billingd's main pool size in this run, and the most
// connections the mirror runs (mirrorConnections says why).
func (o options) mainPool() int {
	if o.poolMaxConns == 0 {
		return postgres.DefaultMaxConns
	}
	return o.poolMaxConns
}

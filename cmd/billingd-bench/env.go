package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// env is everything a run measures and drives: the bench database, the
// billingd process, the token issuer and Stripe stand-in served from this
// process, and the seeded accounts.
type env struct {
	opts       options
	log        *logger
	tmp        string
	dbURL      string        // the bench database, for pgbench and setup
	pool       *pgxpool.Pool // the bench's own connections (setup, old rows)
	issuer     *devissuer.Issuer
	stripeURL  string
	canned     *cannedSubscriptions // the canned Stripe's state; nil for another stand-in
	pacer      *stripepaytest.Pacer // slows the in-process stand-in to Stripe's pace (latency.go)
	cfg        config.Config        // billingd's configuration, as billingd reads it
	billingd   *exec.Cmd
	listenAddr string
	// metricsAddr is billingd's METRICS_ADDR: a free port of its own (the
	// default one may be another billingd's), where -profile reads pprof.
	metricsAddr string
	// privateServer: the PostgreSQL cluster is the bench's own (server.go).
	privateServer bool
	baseURL       string // billingd's PUBLIC_BASE_URL
	accounts      []*account
	statements    bool      // pg_stat_statements is readable (statements.go)
	pinned        *cpuSplit // -pin: where each side runs (pin.go)
	postmaster    int       // the server's postmaster: the private cluster's, or found when pinning (pin.go)
	cleanups      []func()  // run in reverse by tearDown
	// answer and receipt are what billingd stored for an executed
	// upgrade, once read (billingdAnswer): the mirror stores the same.
	answer, receipt string
}

// setUp builds the environment; on error it tears down what it had built.
func setUp(ctx context.Context, opts options, log *logger) (*env, error) {
	e := &env{opts: opts, log: log}
	if err := e.start(ctx); err != nil {
		e.tearDown()
		return nil, err
	}
	return e, nil
}

// start runs the setup steps in order, logging how long each took.
func (e *env) start(ctx context.Context) error {
	opts := e.opts
	var err error
	if e.tmp, err = os.MkdirTemp("", "billingd-bench-"); err != nil {
		return err
	}
	e.cleanup(func() { os.RemoveAll(e.tmp) })
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"start PostgreSQL", e.startServer},
		{"create database " + opts.dbName, e.createDatabase},
		{"build billingd", e.buildBillingd},
		{"start token issuer", e.startIssuer},
		{"start Stripe stand-in (" + opts.stripe + ")", e.startStripe},
		{"billingd migrate up", e.migrate},
		{"start billingd serve", e.startBillingd},
		{fmt.Sprintf("seed %d orgs with %d principals each", opts.orgs, opts.principals), e.seed},
	}
	if opts.pin {
		steps = append(steps, struct {
			what string
			fn   func(context.Context) error
		}{"pin CPUs", e.pinCPUs})
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		e.log.Printf("%s (%s)", s.what, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func (e *env) cleanup(fn func()) { e.cleanups = append(e.cleanups, fn) }

// tearDown stops what setUp started, newest first.
func (e *env) tearDown() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

// createDatabase drops and recreates the bench database, so every run
// starts from the same empty schema.
func (e *env) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.opts.serverURL)
	if err != nil {
		return fmt.Errorf("connect to BENCH_DATABASE_URL: %w", err)
	}
	// The connection stays open for the whole run, holding a lock that
	// keeps a second bench off this server: two would share the database
	// and the CPU, and both would measure nonsense.
	e.cleanup(func() { conn.Close(context.Background()) })
	var alone bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('billingd-bench'))`).Scan(&alone); err != nil {
		return err
	}
	if !alone {
		return errors.New("another billingd-bench is running against this server")
	}
	name := pgx.Identifier{e.opts.dbName}.Sanitize()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		return err
	}
	if !e.opts.keep {
		e.cleanup(func() { dropDatabase(e.opts.serverURL, name) })
	}
	e.dbURL, err = withDatabase(e.opts.serverURL, e.opts.dbName)
	return err
}

func dropDatabase(serverURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
}

func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("BENCH_DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// queryString encodes a URL's query as PostgreSQL's URI syntax reads it: a
// space as %20 (url.Values.Encode writes "+", which libpq and pgx take
// literally, so a password or an options value with a space would change).
func queryString(q url.Values) string {
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

// withApplicationName sets a database URL's application_name: each side's
// backends are told apart by it (postgres.ReplicaBackends), whatever name
// BENCH_DATABASE_URL or PGAPPNAME would give them.
func withApplicationName(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = queryString(q)
	return u.String()
}

// withPoolSize adds pool_max_conns to a database URL (n = 0: unchanged).
// On a server the bench does not own (BENCH_DATABASE_URL, closeIdle) it also
// lets billingd's pools close a connection idle for a second: billingd
// keeps up to 16 + 32 open after a run at Stripe's pace or with 64 clients,
// and pgbench's connections come next, on a server whose
// max_connections may be stock (100) and shared. The bench's own cluster
// has room for both (max_connections=200), and there billingd keeps pgx's
// default (30 minutes), as a deployed replica does: closing idle
// connections after a second made billingd reconnect in the middle of the
// rows at Stripe's pace, where most of its connections idle between
// bursts (pgxpool reuses the most recently released one), and a first call
// then waited for a new backend and its SCRAM handshake (issue 39: first
// calls' p99 458 ms with it, 276 ms without, at 32 clients).
func withPoolSize(dbURL string, n int, closeIdle bool) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	if n != 0 {
		q.Set("pool_max_conns", fmt.Sprint(n))
	}
	if closeIdle {
		q.Set("pool_max_conn_idle_time", "1s")
		q.Set("pool_health_check_period", "500ms")
	}
	u.RawQuery = queryString(q)
	return u.String()
}

// buildBillingd builds cmd/billingd from the module this bench belongs to.
func (e *env) buildBillingd(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("run from inside the billingd module")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(e.tmp, "billingd"), "./cmd/billingd")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// startIssuer serves a development token issuer (metadata and JWKS) on
// loopback; billingd discovers its JWKS from OAUTH_ISSUER.
func (e *env) startIssuer(context.Context) error {
	iss, err := devissuer.New("")
	if err != nil {
		return err
	}
	addr, err := e.serve(iss.Handler())
	if err != nil {
		return err
	}
	iss.SetIssuerURL("http://" + addr)
	e.issuer = iss
	return nil
}

// serve serves h on a free loopback port until tearDown.
func (e *env) serve(h http.Handler) (addr string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), nil
}

// migrate applies billingd's migrations with its own command. serve could do
// it at start, but its migrator passes DATABASE_URL to the server as is, and
// the server refuses the pool_max_conns parameter -pool-max-conns adds.
func (e *env) migrate(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(e.tmp, "billingd"), "migrate", "up")
	cmd.Env = []string{"DATABASE_URL=" + e.dbURL, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// startBillingd starts the real binary against the bench database and waits
// until it reports ready. Its logs go to a file, as a deployed service's
// would: draining them through a pipe would cost this process CPU.
func (e *env) startBillingd(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	e.listenAddr, e.baseURL = addr, "http://"+addr
	if e.metricsAddr, err = freeAddr(); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(e.tmp, "billingd.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(e.tmp, "billingd"), "serve")
	cmd.Env = append(e.billingdEnv(), "PATH="+os.Getenv("PATH"), "HOME="+os.Getenv("HOME"),
		"DATABASE_URL="+withPoolSize(withApplicationName(e.dbURL, billingdApplicationName), e.opts.poolMaxConns, !e.privateServer))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// billingd dies with the bench, even if the bench is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	// exited is closed once billingd has exited, so that any number of
	// waiters see it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logFile.Close(); close(exited) }()
	e.billingd = cmd
	e.cleanup(func() { stopProcess(cmd, exited) })
	if err := waitReady(ctx, e.baseURL+"/readyz", exited); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, waitErr)
		}
		return fmt.Errorf("%w (log: %s)", err, tail(logFile.Name()))
	}
	return nil
}

var errExited = errors.New("billingd exited")

// billingdEnv is billingd's configuration in the bench, DATABASE_URL aside.
// Everything not set here is billingd's default, rate limits included: the
// load spreads over enough principals never to reach them. Only the purge
// retention is raised to its maximum (90 days), so that the old rows the
// data-size runs insert (all from the last 60 days) stay, as they would in a
// deployment that keeps 90 days of history; the purge job still runs every
// minute and finds nothing to delete.
func (e *env) billingdEnv() []string {
	return append([]string{
		"LISTEN_ADDR=" + e.listenAddr,
		"STRIPE_SECRET_KEY=sk_test_bench", "STRIPE_API_BASE=" + e.stripeURL,
		"OAUTH_ISSUER=" + e.issuer.IssuerURL(),
		"PURGE_RETENTION=2160h",
		"MIGRATE_ON_START=false", // see migrate
		"LOG_FORMAT=json",
		"METRICS_ADDR=" + e.metricsAddr,
		fmt.Sprintf("PPROF=%t", e.opts.profile != ""),
	}, e.opts.billingdEnv...) // -billingd-env: none of the keys above (benchSettings)
}

// stopProcess asks cmd to stop (SIGTERM drains requests) and kills it if it
// has not within 10s.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func waitReady(ctx context.Context, url string, exited <-chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s not ready within 60s", url)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 2000 {
		_, _ = f.Seek(-2000, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

package devenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devissuer"
)

// Options configure Start.
type Options struct {
	// Dir holds the helpers' logs and, unless billingd runs as root, the
	// private cluster (Dir/pg), its password and the Stripe fake's state;
	// billingd dev uses .dev in the working directory. As root, the cluster
	// and the fake's state live where the postgres user can reach them
	// (see rootHome), and the welcome text names the place.
	Dir string
	// Stripe is the stand-in to run when STRIPE_SECRET_KEY is unset; empty
	// means StripeFake.
	Stripe StripeStandIn
	// Progress receives a line per step and the helpers' complaints.
	Progress io.Writer
}

// Env is what Start brought up, and the configuration pointing billingd at
// it.
type Env struct {
	// Config is the configuration Start was given, with the database, Stripe
	// and issuer settings filled in.
	Config config.Config
	// Issuer is the development token issuer; it mints the printed tokens.
	Issuer *devissuer.Issuer
	// Database and Stripe say where those came from, for the welcome text.
	Database, Stripe string

	dir      string        // the dev directory: logs
	stateDir string        // where the data lives: the dev directory or, as root, the cluster's home
	standIn  StripeStandIn // what runs if STRIPE_SECRET_KEY is unset
	fake     *fakeStripe   // when the Stripe fake runs
	progress io.Writer
	stops    []func() error // run in reverse order by Stop
}

// Listen opens billingd dev's HTTP listener. It refuses any address but
// loopback: dev mode prints bearer tokens and serves the keys of an issuer
// that signs anything, so it must not be reachable from other machines.
func Listen(listenAddr string) (net.Listener, error) {
	if !isLoopback(listenAddr) {
		return nil, fmt.Errorf("LISTEN_ADDR %s is not a loopback address: billingd dev is for development only and listens on 127.0.0.1, ::1 or localhost (billingd serve listens anywhere)", listenAddr)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on LISTEN_ADDR %s: %w (set LISTEN_ADDR to another loopback port, e.g. 127.0.0.1:8081)", listenAddr, err)
	}
	return ln, nil
}

func isLoopback(listenAddr string) bool {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start brings up what cfg lacks: a database unless DATABASE_URL is set, a
// Stripe stand-in (opts.Stripe) unless STRIPE_SECRET_KEY is set, and always
// the development token issuer. On error it stops whatever it had started.
func Start(ctx context.Context, cfg config.Config, opts Options) (_ *Env, err error) {
	e := &Env{Config: cfg, dir: opts.Dir, stateDir: opts.Dir, standIn: cmp.Or(opts.Stripe, StripeFake), progress: opts.Progress}
	// One machine: a developer's webhook receiver runs on it too
	// (WEBHOOK_ALLOW_PRIVATE_NETWORKS, contract §3).
	e.Config.Webhooks.AllowPrivateNetworks = true
	if e.progress == nil {
		e.progress = io.Discard
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.Dir, err)
	}
	if err := e.startDatabase(ctx, opts.Dir); err != nil {
		return nil, err
	}
	if err := e.startStripe(ctx); err != nil {
		return nil, err
	}
	if err := e.startIssuer(); err != nil {
		return nil, err
	}
	return e, nil
}

// Stop stops everything Start started, the last started first.
func (e *Env) Stop() error {
	var errs []error
	for i := len(e.stops) - 1; i >= 0; i-- {
		errs = append(errs, e.stops[i]())
	}
	e.stops = nil
	return errors.Join(errs...)
}

func (e *Env) step(format string, args ...any) {
	fmt.Fprintf(e.progress, "billingd dev: "+format+"\n", args...)
}

// startDatabase picks, in order: DATABASE_URL, a private cluster of the
// installed PostgreSQL, a container when Docker runs.
func (e *Env) startDatabase(ctx context.Context, dir string) error {
	if e.Config.DatabaseURL != "" {
		e.Database = "DATABASE_URL (" + hostOf(e.Config.DatabaseURL) + ")"
		return nil
	}
	binDir, err := PostgresBinDir()
	if err == nil {
		return e.startCluster(ctx, binDir, dir)
	}
	if dockerAvailable(ctx) {
		e.step("no PostgreSQL installed; starting one in Docker with testcontainers (%s)", containerImage)
		dbURL, stop, err := startContainer(ctx, e.progress)
		if err != nil {
			return err
		}
		e.stops = append(e.stops, stop)
		e.Config.DatabaseURL, e.Database = dbURL, "a Docker container ("+containerImage+"), removed on exit"
		return nil
	}
	return errors.New("billingd dev needs PostgreSQL and found neither its server binaries (initdb, postgres) nor Docker.\n" +
		"Install one of them and run it again:\n" +
		"  Debian/Ubuntu: sudo apt-get install postgresql\n" +
		"  Fedora:        sudo dnf install postgresql-server\n" +
		"  macOS:         brew install postgresql@16\n" +
		"  or Docker:     https://docs.docker.com/engine/install/\n" +
		"or point it at an existing server: DATABASE_URL=postgres://user:password@host:5432/db")
}

// startCluster runs the private cluster. With the Stripe fake, billingd
// uses a database of its own, paired with the fake's saved state: when that
// state is missing (first run, or removed), the database is made anew,
// since the Stripe ids it holds would point at nothing.
func (e *Env) startCluster(ctx context.Context, binDir, dir string) error {
	c, err := newCluster(binDir, dir)
	if err != nil {
		return err
	}
	e.stateDir = c.home
	database, fresh := clusterDatabase, false
	if e.runsFake() {
		database, fresh = clusterFakeDatabase, !hasFakeState(c.home)
	}
	proc, dbURL, err := c.start(ctx, database, fresh)
	if err != nil {
		return err
	}
	e.stops = append(e.stops, func() error { return stopPostgres(proc) })
	runAs := ""
	if c.owner != nil {
		runAs = ", run by user postgres"
	}
	e.Config.DatabaseURL, e.Database = dbURL, "a private cluster in "+c.dataDir+" ("+binDir+runAs+"), log "+c.logPath
	e.step("PostgreSQL on %s (pid %d, data in %s)", hostOf(dbURL), proc.pid(), c.dataDir)
	return nil
}

// runsFake reports whether billingd dev serves the Stripe fake.
func (e *Env) runsFake() bool {
	return e.Config.StripeSecretKey == "" && e.standIn == StripeFake
}

// startStripe runs the chosen stand-in unless a Stripe key is configured.
func (e *Env) startStripe(ctx context.Context) error {
	switch {
	case e.Config.StripeSecretKey != "":
		e.Stripe = "Stripe, with STRIPE_SECRET_KEY"
		return nil
	case e.runsFake():
		return e.startFakeStripe()
	}
	proc, base, err := startStripeMock(ctx, e.dir)
	if err != nil {
		return err
	}
	e.stops = append(e.stops, func() error { return stopStripeMock(proc) })
	e.Config.StripeSecretKey, e.Config.StripeAPIBase = stripeMockKey, base
	e.Stripe = "stripe-mock " + StripeMockVersion + " at " + base + " (stateless: first calls quote 2009 fixtures, and second calls are refused as drift since its subscriptions never match; --stripe=fake to change plans)"
	e.step("stripe-mock on %s (pid %d)", base, proc.pid())
	return nil
}

// startFakeStripe serves internal/stripepay/stripepaytest in this process, its state
// kept next to the database.
func (e *Env) startFakeStripe() error {
	f, err := startFakeStripe(e.Config.Plans, e.stateDir, e.progress)
	if err != nil {
		return err
	}
	e.stops = append(e.stops, f.stop)
	e.fake = f
	e.Config.StripeSecretKey, e.Config.StripeAPIBase = stripeMockKey, f.base
	e.Stripe = "the Stripe fake (internal/stripepay/stripepaytest) at " + f.base + ", state in " + f.statePath +
		" (keeps subscriptions, honours idempotency keys, prorates from the period; --stripe=mock for stripe-mock)"
	e.step("Stripe fake on %s", f.base)
	return nil
}

// startIssuer serves the development issuer's metadata and keys on a free
// loopback port and points billingd at it. A configured OAUTH_ISSUER is
// replaced: dev mode prints tokens, so it needs an issuer it can mint with.
func (e *Env) startIssuer() error {
	iss, err := devissuer.New("")
	if err != nil {
		return err
	}
	iss.OrgClaim = e.Config.OAuthOrgClaim
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("development token issuer: %w", err)
	}
	srv := &http.Server{Handler: developmentOnly(iss.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.stops = append(e.stops, srv.Close)
	iss.SetIssuerURL("http://" + ln.Addr().String())
	// The login page's demo people (DEVELOPMENT ONLY): the agent's user,
	// who verifies their own changes, and an admin, who approves others'.
	iss.SetUsers(
		devissuer.User{Subject: AgentSubject, Org: DemoOrg, Scopes: agentScopes, Label: "the person the demo agent acts for"},
		devissuer.User{Subject: AdminSubject, Org: DemoOrg, Scopes: adminScopes, Label: "an administrator who approves"},
	)
	iss.SetDefaultAudience(e.Config.OAuthAudiences[0])
	e.Issuer = iss
	e.Config.OAuthIssuer, e.Config.OAuthJWKSURL = iss.IssuerURL(), iss.JWKSURL()
	if e.Config.OIDCClientID == "" {
		e.Config.OIDCClientID = DevClientID
	}
	e.namePersonClients()
	// Pasting a bearer token into the pages is for billingd dev only.
	e.Config.DevTokenPaste = true
	e.step("development token issuer (DEVELOPMENT ONLY) on %s", iss.IssuerURL())
	return nil
}

// namePersonClients adds the admin token's client to PERSON_CLIENTS: its
// calls are then a person's, as an operator's own dashboard's would be,
// while the agent token's client stays an agent.
func (e *Env) namePersonClients() {
	if !slices.Contains(e.Config.PersonClients, DashboardClient) {
		e.Config.PersonClients = append(e.Config.PersonClients, DashboardClient)
	}
}

// developmentOnly labels every answer of the issuer, for anyone who finds
// its address in a token.
func developmentOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Billingd-Dev", "development-only token issuer; never trust it in production")
		h.ServeHTTP(w, r)
	})
}

// hostOf is the host:port of a URL, so that progress lines never show the
// database password.
func hostOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Host
	}
	return "?"
}

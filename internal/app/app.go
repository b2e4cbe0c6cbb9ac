// Package app assembles billingd from its configuration: database pool,
// store, Stripe provider, handshake service, token verifier and HTTP
// handler: the one edge (internal/httpedge) with the REST API and the MCP
// endpoint behind it. The binary and the integration tests build the server
// the same way, through New and HTTPServer.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	httppprof "net/http/pprof"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/failpoint"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/signin"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/telemetry"
	"github.com/billingd/billingd/internal/tracing"
	"github.com/billingd/billingd/internal/webhooks"
	"github.com/billingd/billingd/mcp"
	"github.com/billingd/billingd/rest"
)

// App is a running billingd, minus the listener.
type App struct {
	Config config.Config
	// Handler serves the API listener (LISTEN_ADDR): REST, MCP, webhooks,
	// health, the dashboard.
	Handler http.Handler
	// MetricsHandler serves /metrics on the metrics listener
	// (METRICS_ADDR), never on the API's.
	MetricsHandler http.Handler
	Service        *billing.Service
	Store          *postgres.Store
	Pool           *pgxpool.Pool
	// Executions is the pool of the transactions that span a Stripe
	// request (second calls), CONFIRM_CONCURRENCY connections.
	Executions *pgxpool.Pool
	Log        *slog.Logger
	Metrics    *telemetry.Metrics
	// Receipts signs receipts and audit checkpoints; its published keys
	// are served at /.well-known/jwks.json.
	Receipts *receipt.Set
	// tracing is nil when traces are off.
	tracing *tracing.Tracing
	// Endpoints manages outbound webhook endpoints; Deliverer sends their
	// deliveries (webhooks.go).
	Endpoints *webhooks.Endpoints
	Deliverer *webhooks.Deliverer
	verifier  *auth.Verifier
	// signIn signs people in on the pages; nil without OIDC_CLIENT_ID.
	signIn rest.SignIn
	// api is the REST API's router (Routes).
	api *echo.Echo
}

// Routes lists the REST API's routes as its router registered them (MCP
// is served beside it at /mcp): the gate sweep classifies every one, so
// that a route added later is swept or fails the sweep.
func (a *App) Routes() []*echo.Route { return a.api.Routes() }

// Options replaces parts of the default assembly (tests, benchmarks).
type Options struct {
	// Payments replaces the Stripe provider built from the configuration.
	Payments billing.PaymentProvider
	// Logger replaces the logger built from LOG_FORMAT on LogOutput.
	Logger *slog.Logger
	// LogOutput receives logs when Logger is nil (default: discarded).
	LogOutput io.Writer
	// Tracer observes every database query.
	Tracer pgx.QueryTracer
	// Tracing, when not nil, traces requests, queries, Stripe requests
	// and the money path's steps (internal/tracing; OTEL_* variables).
	Tracing *tracing.Tracing
}

// New builds billingd from cfg: it migrates the database when
// MIGRATE_ON_START says so, then wires every part. Close releases them.
func New(ctx context.Context, cfg config.Config, opts Options) (*App, error) {
	if err := cfg.Require("DATABASE_URL", "OAUTH_ISSUER"); err != nil {
		return nil, err
	}
	if opts.Payments == nil {
		if err := cfg.Require("STRIPE_SECRET_KEY"); err != nil {
			return nil, err
		}
	}
	if err := cfg.CheckReceiptKeyCustody(); err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: opts.Logger, tracing: opts.Tracing}
	if a.Log == nil {
		a.Log = NewLogger(cfg, opts.LogOutput)
	}
	a.Log = slog.New(a.tracing.LogHandler(a.Log.Handler()))
	queries := queryTracers(opts.Tracer, a.tracing.QueryTracer())
	pool, err := OpenDatabase(ctx, cfg, queries)
	if err != nil {
		return nil, err
	}
	a.Pool = pool
	if a.Executions, err = OpenExecutions(ctx, cfg, queries); err != nil {
		a.Close()
		return nil, err
	}
	a.Store = postgres.NewStore(pool).WithExecutions(a.Executions)
	a.Metrics = telemetry.New()
	a.Metrics.ObservePool(pool)
	payments := a.Metrics.ObservePayments(paymentsFor(cfg, opts.Payments, a.tracing), a.Log)
	if a.Receipts, err = receipt.Load(ctx, cfg.ReceiptSigningKeys, a.Store); err != nil {
		a.Close()
		return nil, err
	}
	if a.Service, err = newService(cfg, a.Store, payments, a.Log, a.Receipts, a.tracing); err != nil {
		a.Close()
		return nil, err
	}
	a.verifier, err = auth.NewVerifier(ctx, auth.Config{
		Issuer: cfg.OAuthIssuer, JWKSURL: cfg.OAuthJWKSURL, Audiences: cfg.OAuthAudiences, OrgClaim: cfg.OAuthOrgClaim,
	})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("access-token verifier: %w", startupError(err))
	}
	if cfg.OIDCClientID != "" {
		client, err := signin.New(ctx, signin.Config{Issuer: cfg.OAuthIssuer, ClientID: cfg.OIDCClientID,
			ClientSecret: cfg.OIDCClientSecret, RedirectURL: cfg.PublicBaseURL + "/auth/callback",
			Audience: cfg.OAuthAudiences[0], AudienceParams: cfg.OIDCAudienceParams, Scopes: cfg.OIDCScopes,
			ClockSkew: cfg.ConfirmClockSkew})
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("OIDC sign-in (OIDC_CLIENT_ID): %w", startupError(err))
		}
		a.signIn = client
	}
	a.newWebhooks()
	a.Handler = a.edge()
	a.MetricsHandler = MetricsHandler(a.Metrics, cfg.Pprof)
	return a, nil
}

// publishedReceiptKeys is the JWKS served at /.well-known/jwks.json.
func (a *App) publishedReceiptKeys(ctx context.Context) (any, error) {
	return a.Receipts.Published(ctx)
}

// startupError is err, or the issuer mismatch in it alone: its message
// names OAUTH_ISSUER and says what to set it to, which is all an operator
// needs.
func startupError(err error) error {
	var mismatch *auth.IssuerMismatchError
	if errors.As(err, &mismatch) {
		return mismatch
	}
	return err
}

// edge is the API listener's root handler: the shared middleware of
// internal/httpedge, with MCP at /mcp and the REST API for every other path.
func (a *App) edge() http.Handler {
	api := rest.New(rest.Config{
		Service: a.Service, Verifier: a.verifier, PublicBaseURL: a.Config.PublicBaseURL, Issuer: a.verifier.Issuer(),
		ParseWebhook: webhookParser(a.Config.StripeWebhookSecret), Ready: a.Store.Ready, Logger: a.Log,
		Observer: a.Metrics, ReceiptKeys: a.publishedReceiptKeys,
		SignIn: a.signIn, Sessions: a.Store, SignInLimits: a.Config.SignInLimits, TokenPaste: a.Config.DevTokenPaste,
		TrustedProxies: a.Config.TrustedProxies, WebhookEndpoints: a.Endpoints,
	})
	a.api = api
	edge := httpedge.New(httpedge.Config{
		Logger: a.Log, Observer: a.Metrics,
		// Tokens and account data travel under these; nothing may cache them.
		NoStorePrefixes: []string{"/api/", "/mcp"},
	}, api)
	edge.Handle("/mcp", mcp.Handler(a.MCPConfig()))
	return a.tracing.Handler(edge)
}

// MetricsHandler serves m at /metrics (and, with pprof, net/http/pprof's
// /debug/pprof/) for the metrics listener, behind an edge of its own: its
// errors are envelopes too, and scrapes are neither logged nor counted.
func MetricsHandler(m *telemetry.Metrics, pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	if pprof {
		mux.HandleFunc("GET /debug/pprof/", httppprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", httppprof.Trace)
	}
	return httpedge.New(httpedge.Config{}, mux)
}

// HTTPServer is the http.Server of every billingd listener, for handler:
// timeouts that let a second call wait for Stripe but not a slow client
// hold a connection forever, and a header limit far below net/http's 1 MiB.
func HTTPServer(cfg config.Config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.StripeTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    httpedge.MaxHeaderBytes,
	}
}

// MCPConfig is what the MCP tools need at /mcp.
func (a *App) MCPConfig() mcp.Config {
	return mcp.Config{Service: a.Service, Verifier: a.verifier, PublicBaseURL: a.Config.PublicBaseURL, Logger: a.Log,
		RequestStateKey: []byte(a.Config.MCPRequestStateKey), Observer: a.Metrics, ReplicaID: a.Config.MCPReplicaID,
		Middleware: a.tracing.MCPMiddleware()}
}

// Close releases the database pool and stops the key refresh.
func (a *App) Close() {
	if a.verifier != nil {
		a.verifier.Close()
	}
	if a.Pool != nil {
		a.Pool.Close()
	}
	if a.Executions != nil {
		a.Executions.Close()
	}
}

// NewLogger returns the structured logger LOG_FORMAT asks for, writing to w
// (nil: discard).
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	switch {
	case w == nil:
		return slog.New(slog.DiscardHandler)
	case cfg.LogFormat == "text":
		return slog.New(slog.NewTextHandler(w, nil))
	default:
		return slog.New(slog.NewJSONHandler(w, nil))
	}
}

// OpenDatabase migrates when MIGRATE_ON_START says so and opens the pool.
func OpenDatabase(ctx context.Context, cfg config.Config, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	if cfg.MigrateOnStart {
		if err := MigrateUp(cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	return postgres.Open(ctx, cfg.DatabaseURL, poolConfig(cfg, tracer))
}

// ExecutionsPool names the executions pool's connections: they are the
// replica's application_name and this ("billingd executions"), so an
// operator, and the bench, can tell them from the main pool's.
const ExecutionsPool = "executions"

// OpenExecutions opens the pool of the transactions that span a Stripe
// request: as many connections as second calls may execute at once
// (CONFIRM_CONCURRENCY), whatever DATABASE_URL's pool_max_conns says, so an
// admitted second call never waits for one and never takes one of the main
// pool's. Open connects once to check the database answers; the other
// connections are opened when first needed.
func OpenExecutions(ctx context.Context, cfg config.Config, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pc := poolConfig(cfg, tracer)
	pc.MaxConns, pc.Pool = int32(cmp.Or(cfg.ConfirmConcurrency, billing.DefaultMaxExecutions)), ExecutionsPool
	return postgres.Open(ctx, cfg.DatabaseURL, pc)
}

func poolConfig(cfg config.Config, tracer pgx.QueryTracer) postgres.PoolConfig {
	// A second call holds its row lock while Stripe answers; a concurrent call
	// for the same org must be willing to wait at least that long.
	return postgres.PoolConfig{LockTimeout: cfg.StripeTimeout + 10*time.Second, Tracer: tracer}
}

// MigrateUp applies every pending migration.
func MigrateUp(databaseURL string) error {
	m, err := postgres.NewMigrator(databaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up()
}

// NewService builds the handshake service on store and payments (nil: the
// Stripe provider from the configuration), for commands that execute no
// change (it signs no receipts).
func NewService(cfg config.Config, store billing.Store, payments billing.PaymentProvider, log *slog.Logger) (*billing.Service, error) {
	return newService(cfg, store, payments, log, nil, nil)
}

// newService is NewService signing receipts with receipts, its steps
// traced by traces (nil: not traced).
func newService(cfg config.Config, store billing.Store, payments billing.PaymentProvider, log *slog.Logger,
	receipts billing.ReceiptSigner, traces *tracing.Tracing) (*billing.Service, error) {
	catalog, err := billing.NewCatalog(cfg.Plans)
	if err != nil {
		return nil, fmt.Errorf("plan catalog: %w", err)
	}
	return billing.NewService(billing.Config{
		Store: store, Payments: paymentsFor(cfg, payments, traces), Catalog: catalog,
		TokenTTL: cfg.ConfirmTTL, ClockSkew: cfg.ConfirmClockSkew,
		ExecutionTimeout: cfg.StripeTimeout, Limits: cfg.RateLimits, PublicBaseURL: cfg.PublicBaseURL,
		VerifyACRValues: cfg.VerifyACRValues, PersonClients: cfg.PersonClients, Logger: log,
		Receipts: receipts, Livemode: cfg.StripeLivemode(), MaxExecutions: cfg.ConfirmConcurrency,
		Steps: billing.StepHooks(traces.StepHook(), stepHook(cfg, log)),
	})
}

// stepHook is the failpoints' hook of tests (BILLINGD_FAILPOINTS); nil,
// and free, in production.
func stepHook(cfg config.Config, log *slog.Logger) billing.StepHook {
	if cfg.FailpointsURL == "" {
		return nil
	}
	log.Warn("failpoints armed: every step of the money path asks a test controller", "url", cfg.FailpointsURL)
	return failpoint.Remote(cfg.FailpointsURL, log)
}

// paymentsFor returns payments, or the Stripe provider the configuration
// describes when it is nil, its requests and steps traced by traces (nil:
// not traced).
func paymentsFor(cfg config.Config, payments billing.PaymentProvider, traces *tracing.Tracing) billing.PaymentProvider {
	if payments != nil {
		return payments
	}
	var wrap func(http.RoundTripper) http.RoundTripper
	if traces != nil {
		wrap = traces.Transport
	}
	return stripepay.New(stripepay.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Timeout: cfg.StripeTimeout,
		MaxNetworkRetries: int64(cfg.StripeMaxNetworkRetries), WrapTransport: wrap,
		Steps: billing.StepHooks(traces.StepHook(), stepHook(cfg, slog.New(slog.DiscardHandler)))})
}

// queryTracers is every tracer of database queries that is set, as one (nil
// when none is).
func queryTracers(tracers ...pgx.QueryTracer) pgx.QueryTracer {
	var set []pgx.QueryTracer
	for _, t := range tracers {
		if t != nil {
			set = append(set, t)
		}
	}
	switch len(set) {
	case 0:
		return nil
	case 1:
		return set[0]
	}
	return multitracer.New(set...)
}

// webhookParser is the Stripe adapter's webhook parser bound to secret, in
// the shape the REST transport asks for (nil when webhooks are not
// configured), so that the transport never imports the adapter.
func webhookParser(secret string) rest.WebhookParser {
	if secret == "" {
		return nil
	}
	return func(payload []byte, signature string) (billing.SubscriptionEvent, bool, error) {
		ev, relevant, err := stripepay.ParseSubscriptionEvent(payload, signature, secret)
		if errors.Is(err, stripepay.ErrBadSignature) {
			err = fmt.Errorf("%w: %w", rest.ErrWebhookSignature, err)
		}
		return ev, relevant, err
	}
}

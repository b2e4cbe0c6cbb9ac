package rest

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/requestid"
)

// Verifier checks bearer access tokens.
type Verifier interface {
	Verify(ctx context.Context, raw string) (auth.Identity, error)
}

// Config wires the HTTP API.
type Config struct {
	Service  *billing.Service
	Verifier Verifier
	// PublicBaseURL is the server's canonical external URL; protected resource
	// metadata and WWW-Authenticate challenges are built from it.
	PublicBaseURL string
	// Issuer is the authorization server listed in the metadata.
	Issuer string
	// StripeWebhookSecret verifies webhook signatures; "" refuses webhooks.
	StripeWebhookSecret string
	// Ready reports whether the server can take traffic (database reachable,
	// schema current).
	Ready  func(context.Context) error
	Logger *slog.Logger
	// Mount adds more routes (MCP, webhooks) to the same server.
	Mount func(e *echo.Echo)
	// Observer, when set, is told about every request and handshake call.
	Observer Observer
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// ReceiptKeys is the JWKS of the receipt verification keys, served at
	// /.well-known/jwks.json.
	ReceiptKeys any
}

// Observer receives measurements for metrics. The route is Echo's template
// (/api/billing/confirmations/:id/cancel), or "unmatched".
type Observer interface {
	ObserveRequest(method, route string, status int, elapsed time.Duration)
	ObserveHandshake(op billing.Operation, res billing.ChangeResult, err error)
}

type server struct {
	Config
	log *slog.Logger
	// routes holds the paths of the registered routes, so that a request
	// that matched none is measured as "unmatched" rather than by a path
	// the client chose.
	routes map[string]bool
}

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 64 << 10

// New returns the HTTP handler with every route of the REST API.
func New(cfg Config) *echo.Echo {
	s := &server{Config: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestID, s.accessLog, middleware.Recover(), middleware.BodyLimit("64K"))

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/.well-known/oauth-protected-resource", s.resourceMetadata(""))
	e.GET("/.well-known/oauth-protected-resource/mcp", s.resourceMetadata("/mcp"))
	e.GET("/.well-known/jwks.json", s.receiptKeys)

	api := e.Group("/api/billing")
	read, write, admin := s.require(auth.ScopeRead), s.require(auth.ScopeWrite), s.require(auth.ScopeAdmin)
	api.GET("/plans", s.plans, read)
	api.GET("/subscription", s.subscription, read)
	api.POST("/upgrade", s.changePlan(billing.OpUpgrade), write)
	api.POST("/downgrade", s.changePlan(billing.OpDowngrade), write)
	api.GET("/confirmations", s.confirmations, read)
	api.POST("/confirmations/:id/cancel", s.cancel, write)
	api.GET("/audit", s.audit, admin)
	api.GET("/audit/export", s.auditExport, admin)
	api.GET("/confirmations/:id/receipt", s.receipt, read)
	api.GET("/policy", s.getPolicy, admin)
	api.PUT("/policy", s.putPolicy, admin)
	api.POST("/confirmations/:id/approve", s.decideApproval(true), admin)
	api.POST("/confirmations/:id/reject", s.decideApproval(false), admin)
	e.POST("/webhooks/stripe", s.stripeWebhook)
	e.GET("/openapi.yaml", openAPI)
	if cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(cfg.Metrics))
	}
	mountDashboard(e)
	if cfg.Mount != nil {
		cfg.Mount(e)
	}
	s.routes = map[string]bool{}
	for _, r := range e.Routes() {
		s.routes[r.Path] = true
	}
	return e
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID takes a sane incoming X-Request-Id or makes one, and echoes it on
// every response. It also goes into the request's context, for the logs of
// code that never sees the echo.Context (the Stripe calls).
func (s *server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		c.Set(requestIDKey, id)
		c.SetRequest(c.Request().WithContext(requestid.With(c.Request().Context(), id)))
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

const requestIDKey = "request_id"

func requestID(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// accessLog logs one line per request, never headers or bodies, so never a
// bearer token or a confirmation token, and measures it.
func (s *server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		elapsed := time.Since(start)
		attrs := []any{"method", c.Request().Method, "route", c.Path(), "status", c.Response().Status,
			"duration_ms", elapsed.Milliseconds(), "request_id", requestID(c)}
		if caller, ok := c.Get(callerKey).(billing.Caller); ok {
			attrs = append(attrs, "org", caller.Org, "principal", caller.Principal)
		}
		s.log.InfoContext(c.Request().Context(), "request", attrs...)
		if s.Observer != nil {
			s.Observer.ObserveRequest(c.Request().Method, s.routeOf(c), c.Response().Status, elapsed)
		}
		return nil
	}
}

// routeOf is the route template the request matched, or "unmatched". Echo
// leaves a partial match's prefix in c.Path() on a 404, hence the check
// against the registered routes.
func (s *server) routeOf(c echo.Context) string {
	if route := c.Path(); s.routes[route] {
		return route
	}
	return "unmatched"
}

func (s *server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) readyz(c echo.Context) error {
	if s.Ready != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := s.Ready(ctx); err != nil {
			s.log.Warn("not ready", "err", err)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

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
}

type server struct {
	Config
	log *slog.Logger
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

	api := e.Group("/api/billing")
	read, write, admin := s.require(auth.ScopeRead), s.require(auth.ScopeWrite), s.require(auth.ScopeAdmin)
	api.GET("/plans", s.plans, read)
	api.GET("/subscription", s.subscription, read)
	api.POST("/upgrade", s.changePlan(billing.OpUpgrade), write)
	api.POST("/downgrade", s.changePlan(billing.OpDowngrade), write)
	api.GET("/confirmations", s.confirmations, read)
	api.POST("/confirmations/:id/cancel", s.cancel, write)
	api.GET("/audit", s.audit, admin)
	api.GET("/policy", s.getPolicy, admin)
	api.PUT("/policy", s.putPolicy, admin)
	api.POST("/confirmations/:id/approve", s.decideApproval(true), admin)
	api.POST("/confirmations/:id/reject", s.decideApproval(false), admin)
	e.POST("/webhooks/stripe", s.stripeWebhook)
	if cfg.Mount != nil {
		cfg.Mount(e)
	}
	return e
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID takes a sane incoming X-Request-Id or makes one, and echoes it on
// every response.
func (s *server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		c.Set(requestIDKey, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

const requestIDKey = "request_id"

func requestID(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// accessLog logs one line per request: never headers or bodies, so never a
// bearer token or a confirmation token.
func (s *server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		attrs := []any{"method", c.Request().Method, "route", c.Path(), "status", c.Response().Status,
			"duration_ms", time.Since(start).Milliseconds(), "request_id", requestID(c)}
		if caller, ok := c.Get(callerKey).(billing.Caller); ok {
			attrs = append(attrs, "org", caller.Org, "principal", caller.Principal)
		}
		s.log.InfoContext(c.Request().Context(), "request", attrs...)
		return nil
	}
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

package rest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/requestid"
	"github.com/billingd/billingd/internal/websession"
)

// Verifier checks bearer access tokens.
type Verifier = httpedge.Verifier

// Config wires the HTTP API.
type Config struct {
	Service  *billing.Service
	Verifier Verifier
	// PublicBaseURL is the server's canonical external URL; protected resource
	// metadata and WWW-Authenticate challenges are built from it.
	PublicBaseURL string
	// Issuer is the authorization server listed in the metadata.
	Issuer string
	// ParseWebhook authenticates and reads Stripe webhook payloads (the
	// Stripe adapter, bound to STRIPE_WEBHOOK_SECRET by internal/app); nil
	// refuses webhooks.
	ParseWebhook WebhookParser
	// Ready reports whether the server can take traffic (database reachable,
	// schema current).
	Ready  func(context.Context) error
	Logger *slog.Logger
	// Observer, when set, is told about every handshake call. Requests are
	// measured by the edge (internal/httpedge).
	Observer Observer
	// ReceiptKeys returns the JWKS of the receipt verification keys,
	// served at /.well-known/jwks.json. A function: replicas without key
	// files publish keys registered by each other (internal/receipt).
	ReceiptKeys func(context.Context) (any, error)
	// SignIn signs people in on the pages (OIDC); nil: no sign-in.
	SignIn SignIn
	// Sessions keeps sign-ins and page sessions.
	Sessions websession.Store
	// SignInLimits bound the sign-ins started per client address and in
	// all, or per confirmation for a sign-in to verify or approve one.
	SignInLimits websession.LoginLimits
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (TRUSTED_PROXIES); none: the peer is the client.
	TrustedProxies []netip.Prefix
	// TokenPaste lets the pages sign in with a pasted bearer token: billingd
	// dev only.
	TokenPaste bool
	// WebhookEndpoints manages outbound webhook endpoints; nil: no routes.
	WebhookEndpoints WebhookEndpoints
}

// Observer receives the outcome of each handshake call, for metrics.
type Observer interface {
	ObserveHandshake(op billing.Operation, res billing.ChangeResult, err error)
}

type server struct {
	Config
	log    *slog.Logger
	bearer httpedge.Bearer
	// routes holds the paths of the registered routes, so that a request
	// that matched none is measured as "unmatched" rather than by a path
	// the client chose.
	routes map[string]bool
	// crossOrigin refuses cross-origin state changes made with the session
	// cookie.
	crossOrigin *http.CrossOriginProtection
}

// New returns the HTTP handler with every route of the REST API. It is
// served behind internal/httpedge, which gives each request its id, bounds
// its body, logs and measures it (by the route template this router names)
// and sets the headers every response carries.
func New(cfg Config) *echo.Echo {
	s := &server{Config: cfg, log: cfg.Logger, crossOrigin: http.NewCrossOriginProtection()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.bearer = httpedge.Bearer{Verifier: cfg.Verifier, Logger: s.log}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = clientIP(cfg.TrustedProxies)
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.nameRoute)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/.well-known/oauth-protected-resource", s.resourceMetadata(""))
	e.GET("/.well-known/oauth-protected-resource/mcp", s.resourceMetadata("/mcp"))
	e.GET("/.well-known/jwks.json", s.receiptKeys)

	api := e.Group("/api/billing")
	read, write, admin := s.require(auth.ScopeRead), s.require(auth.ScopeWrite), s.require(auth.ScopeAdmin)
	api.GET("/plans", s.plans, read)
	api.GET("/subscription", s.subscription, read)
	for _, op := range billing.Offers() { // every gated operation, both calls of its handshake
		api.POST("/"+op.Path, s.changePlan(op.Name), write)
	}
	api.GET("/confirmations", s.confirmations, read)
	api.POST("/confirmations/:id/cancel", s.cancel, write)
	api.GET("/audit", s.audit, admin)
	api.GET("/audit/export", s.auditExport, admin)
	api.GET("/confirmations/:id/receipt", s.receipt, read)
	api.GET("/policy", s.getPolicy, admin)
	api.PUT("/policy", s.putPolicy, admin)
	api.POST("/confirmations/:id/approve", s.decideApproval(true), admin)
	api.POST("/confirmations/:id/reject", s.decideApproval(false), admin)
	api.POST("/mandates", s.grantMandate, write)
	api.GET("/mandates", s.listMandates, read)
	api.DELETE("/mandates/:id", s.revokeMandate, write)
	s.mountWebhookEndpoints(api, admin)
	e.POST("/webhooks/stripe", s.stripeWebhook)
	e.GET("/openapi.yaml", openAPI)
	mountDashboard(e, s)
	mountSignIn(e, s)
	mountMandatesPage(e, s)
	s.routes = map[string]bool{}
	for _, r := range e.Routes() {
		s.routes[r.Path] = true
	}
	return e
}

// clientIP is c.RealIP: the peer's address, or, from a trusted proxy, the
// rightmost address in X-Forwarded-For that is not a trusted proxy's (the
// ones left of it are whatever the client wrote). Echo trusts loopback,
// link-local and private peers by default, so that anyone on the host or
// the network could name any client: only the configured proxies are.
func clientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(),
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

func requestID(c echo.Context) string {
	return requestid.From(c.Request().Context())
}

// nameRoute tells the edge which route template served the request, for
// its log line and metric.
func (s *server) nameRoute(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		httpedge.SetRoute(c.Request().Context(), s.routeOf(c))
		return err
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

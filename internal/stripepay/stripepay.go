// Package stripepay implements billing.PaymentProvider with Stripe
// (stripe-go v79).
//
// Every Provider owns its own stripe-go client and backend: nothing here
// touches stripe-go's package-level key or backend, so several providers (and
// tests running in parallel) can point at different servers.
//
// stripe-go's own retries (Config.MaxNetworkRetries, STRIPE_MAX_NETWORK_RETRIES)
// resend a request under the same idempotency key, so Stripe executes it at
// most once: a failure with no answer (a reset connection, but not a
// timeout: the request's context has ended by then), a 409 (the key still
// in flight), a 429 lock_timeout and a 5xx that Stripe does not mark
// Stripe-Should-Retry: false, after 0.5 s, then up to 5 s. They never retry
// Stripe's rate limit (a 429 rate_limit: more requests would only make it
// worse); that is billing.ErrRateLimited, a definite "nothing was done".
// Each retry holds the second call's database connection for its wait, so
// the default is one, and no retry is sent after STRIPE_TIMEOUT (stripe-go
// sleeps before a retry without watching the context, so a call can end up
// to one wait after it, having sent nothing more). What is
// still unknown after them, billing settles itself, under the same key.
// (net/http's Transport may also resend a request by itself when a reused
// keep-alive connection dies before any answer; safe for the same reason.)
//
// Errors are classified into the billing sentinels by classify (errors.go);
// their text is short and never contains Stripe's response body.
package stripepay

import (
	"context"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/billingd/billingd/billing"
)

// DefaultTimeout bounds one call to Stripe, its retries included, when Config.Timeout is
// zero. Stripe answers plan changes in well under a second; 20s leaves room
// for a slow payment authorisation without holding the confirming
// transaction open indefinitely.
const DefaultTimeout = 20 * time.Second

// DefaultMaxNetworkRetries is STRIPE_MAX_NETWORK_RETRIES' default: one
// resend under the same key, which settles a lost connection or a lock
// timeout within the second call, for at most ~0.5 s more.
const DefaultMaxNetworkRetries = 1

// MaxNetworkRetriesLimit is the most STRIPE_MAX_NETWORK_RETRIES accepts:
// stripe-go waits up to 5 s before each later retry.
const MaxNetworkRetriesLimit = 3

// Config configures a Provider.
type Config struct {
	// SecretKey is the Stripe API key (sk_…).
	SecretKey string
	// APIBase overrides Stripe's API URL (e.g. stripe-mock or a fake);
	// "" means Stripe's.
	APIBase string
	// Timeout bounds each call to Stripe, its retries included; 0 means
	// DefaultTimeout. It is the context's deadline (bound), not
	// http.Client.Timeout: see httpClient.
	Timeout time.Duration
	// HTTPClient is used for the requests; nil means a new client. It is
	// never modified.
	HTTPClient *http.Client
	// MaxNetworkRetries is how often stripe-go itself retries a failed
	// request, under the same idempotency key (see the package comment). 0
	// leaves every retry to billing; DefaultMaxNetworkRetries is billingd's
	// default (STRIPE_MAX_NETWORK_RETRIES).
	MaxNetworkRetries int64
	// WrapTransport, when set, wraps the transport requests go through:
	// tracing's client span per request (internal/tracing).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Steps runs when a named step of a period-end change begins
	// (billing.StepRelease, StepScheduleCreate, StepPhases, StepKeep): the
	// failpoints of tests. nil in production.
	Steps billing.StepHook
}

// Provider is a billing.PaymentProvider backed by Stripe. It is safe for
// concurrent use.
type Provider struct {
	api *client.API
	// backend and key send the requests whose answers are decoded into
	// wire.go's small structs (callSlim).
	backend stripe.Backend
	key     string
	// timeout bounds each call, its retries included (see bound).
	timeout time.Duration
	steps   billing.StepHook
}

var _ billing.PaymentProvider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) *Provider {
	backendCfg := &stripe.BackendConfig{
		HTTPClient:        httpClient(cfg),
		MaxNetworkRetries: stripe.Int64(max(cfg.MaxNetworkRetries, 0)),
		// stripe-go logs every failed request, body sample included, to
		// stderr by default. The errors we return carry what the caller
		// needs to log, once.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
		// stripe-go reports each request's id and duration to Stripe in a
		// header of the next one (X-Stripe-Client-Telemetry), a JSON
		// encoding per request on billingd's CPU for Stripe's statistics;
		// billingd measures its Stripe calls itself (telemetry).
		EnableTelemetry: stripe.Bool(false),
	}
	if cfg.APIBase != "" {
		backendCfg.URL = stripe.String(cfg.APIBase)
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, backendCfg)
	// Only the API backend is set: billingd calls no Connect (OAuth) or
	// file-upload endpoints.
	return &Provider{api: client.New(cfg.SecretKey, &stripe.Backends{API: backend}), backend: backend, key: cfg.SecretKey,
		timeout: requestTimeout(cfg), steps: cfg.Steps}
}

// bound limits one call, stripe-go's retries included, to the request
// timeout: no request of the call is sent after STRIPE_TIMEOUT, and a
// request cut off by it is not retried (stripe-go stops once the context
// ends, after the wait it had begun).
func (p *Provider) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.timeout)
}

func requestTimeout(cfg Config) time.Duration {
	if cfg.Timeout <= 0 {
		return DefaultTimeout
	}
	return cfg.Timeout
}

// maxIdleConnsPerHost is how many connections to Stripe stay open between
// requests. net/http keeps 2 by default, so with more plan changes in flight
// every request beyond the second opened a new connection (and against
// Stripe a new TLS handshake). make bench, 16 concurrent first calls:
// billingd's CPU per call fell from about 720 µs to 590 µs with this.
const maxIdleConnsPerHost = 64

// keepAliveTransport is net/http's default transport keeping enough idle
// connections to Stripe for concurrent callers.
func keepAliveTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return t
}

// httpClient returns the client to send requests with: a copy of
// cfg.HTTPClient (or a new one) with its transport under cfg.WrapTransport
// and sizedBody (outermost, so that tracing sees each request with its
// length).
//
// It sets no http.Client.Timeout: every call is already bounded by its
// context (bound, cfg.Timeout), and behind a transport that is not
// net/http's own (sizedBody is always in front) a client timeout costs a
// goroutine and a timer per request, started and stopped on billingd's CPU
// for a deadline the context already enforces. A caller's client keeps
// the timeout it has.
func httpClient(cfg Config) *http.Client {
	c := http.Client{Transport: keepAliveTransport()}
	if cfg.HTTPClient != nil {
		c = *cfg.HTTPClient // a copy, so the caller's client keeps its settings
		if c.Transport == nil {
			c.Transport = http.DefaultTransport
		}
	}
	c.Transport = sizedBody{wrap(cfg, c.Transport)}
	return &c
}

// wrap is rt wrapped by cfg.WrapTransport, if any.
func wrap(cfg Config, rt http.RoundTripper) http.RoundTripper {
	if cfg.WrapTransport == nil {
		return rt
	}
	return cfg.WrapTransport(rt)
}

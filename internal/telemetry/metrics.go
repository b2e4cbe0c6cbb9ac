package telemetry

import (
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/billingd/billingd/billing"
)

// Metrics holds billingd's collectors and the registry they are served from.
type Metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	durations  *prometheus.HistogramVec
	handshakes *prometheus.CounterVec
	stripe     *prometheus.HistogramVec
}

// New registers billingd's metrics, with the Go runtime's and the process's,
// on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billingd_http_requests_total",
			Help: "HTTP requests answered, by method, route template and status code.",
		}, []string{"method", "route", "status"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "billingd_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method and route template.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billingd_handshake_calls_total",
			Help: "Handshake calls by operation and outcome: proposed, executed, noop, or the error code.",
		}, []string{"operation", "outcome"}),
		stripe: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "billingd_stripe_request_duration_seconds",
			Help: "Latency of payment provider (Stripe) calls, by call and outcome.",
			// Stripe answers in tens to hundreds of milliseconds; the tail
			// up to STRIPE_TIMEOUT (20s by default) is what holds row locks.
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 60},
		}, []string{"call", "outcome"}),
	}
	m.registry.MustRegister(m.requests, m.durations, m.handshakes, m.stripe,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// ObservePool exports pool's statistics, read at every scrape.
func (m *Metrics) ObservePool(pool *pgxpool.Pool) {
	m.registry.MustRegister(newPoolCollector(pool))
}

// ObserveRequest counts one answered HTTP request. route must be the
// router's template (/api/billing/confirmations/:id/cancel), never the raw
// path, so that ids do not make a time series each.
func (m *Metrics) ObserveRequest(method, route string, status int, elapsed time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.durations.WithLabelValues(method, route).Observe(elapsed.Seconds())
}

// ObserveHandshake counts one call of upgrade_plan or downgrade_plan by its
// outcome (see Outcome).
func (m *Metrics) ObserveHandshake(op billing.Operation, res billing.ChangeResult, err error) {
	m.handshakes.WithLabelValues(string(op), Outcome(res, err)).Inc()
}

// Outcome names what a handshake call did: "proposed" (a first call that
// issued a token), "executed" (a second call that changed the plan),
// "replayed" (a repeated second call answered with the original result),
// "noop" (already on the plan), or the error code it failed with
// (consent_token_expired, payment_failed, …). The error codes are the
// contract's fixed list, so the label stays bounded.
func Outcome(res billing.ChangeResult, err error) string {
	switch {
	case err != nil:
		return string(billing.ErrorCode(err))
	case res.Proposed():
		return "proposed"
	case res.Noop:
		return "noop"
	case res.Replayed:
		return "replayed"
	default:
		return "executed"
	}
}

// Package telemetry is billingd's Prometheus instrumentation: HTTP requests
// by route, handshake outcomes, Stripe call latency and database pool
// statistics, on a registry of its own (so that several servers in one
// process, as in the tests, never collide) served by Handler.
//
// The billing package knows nothing of it. Transports report requests and
// handshake calls through ObserveRequest and ObserveHandshake; the payment
// provider is measured by a decorator (ObservePayments); the pool by a
// collector reading pgxpool.Stat when scraped.
package telemetry

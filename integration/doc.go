// Package integration holds billingd's end-to-end tests: they start the real
// HTTP server against a real PostgreSQL (TEST_DATABASE_URL, or
// testcontainers when Docker is available) and a Stripe stand-in
// (stripe-mock for the wire protocol, internal/stripepay/stripepaytest where a test needs
// state, idempotency or faults), and drive it over HTTP with JWTs signed by
// a test issuer served as a JWKS. On CI (CI=true) a missing PostgreSQL or
// stripe-mock fails the run instead of skipping.
package integration

// Package tracing is billingd's OpenTelemetry tracing (contract §14): one
// request is one trace, with the server span, a span per database round
// trip, a client span per Stripe request and a span per named step of the
// money path (billing/steps.go), all under the caller's W3C traceparent
// when it sends one. The settler's rounds are traces of their own.
//
// It is configured only by OpenTelemetry's own variables: traces are on
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set (and OTEL_SDK_DISABLED is not true), and the SDK reads every other
// OTEL_* variable itself (headers, timeouts, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*).
//
// Off, a *Tracing is nil and every method hands back what it was given (a
// handler, a transport, a logger) or nil (a query tracer, a step hook), so
// nothing is instrumented and nothing costs anything; the global
// OpenTelemetry provider stays the no-op one.
//
// Nothing secret is recorded: server spans carry the route and path, never
// the query string or a header; Stripe client spans carry the URL, never
// the Authorization header; database spans carry the statement text,
// never its parameters.
package tracing

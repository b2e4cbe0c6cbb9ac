// Package rest is billingd's HTTP API for web dashboards, on Echo: routes,
// bearer-token authentication with scopes, strict JSON decoding and the one
// table that maps billing error codes to HTTP statuses. Handlers decode,
// call billing.Service and encode; every handshake rule lives in billing.
//
// The same server carries billingd's own dashboard (dashboard.go, web/), a
// client of this API like any other, and the API's OpenAPI description
// (openapi.yaml), which the integration tests hold every response to.
package rest

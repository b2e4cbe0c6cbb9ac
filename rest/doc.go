// Package rest is billingd's HTTP API for web dashboards, on Echo: routes,
// scopes, strict JSON decoding and the mapping of Echo's own errors onto
// billing codes. Handlers decode, call billing.Service and encode; every
// handshake rule lives in billing. It is served behind internal/httpedge,
// which owns what REST shares with MCP: request ids, the body limit, the
// access log and metrics, bearer authentication and its challenge, and the
// table from billing codes to HTTP statuses and the error envelope.
//
// The same server carries billingd's own dashboard (dashboard.go, web/), a
// client of this API like any other, and the API's OpenAPI description
// (openapi.yaml), which the integration tests hold every response to.
package rest

package httpedge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
)

// Header names of the request ids.
const (
	// HeaderRequestID carries billingd's own id of the request, on every
	// response and, for the handlers, on the request. The audit log and the
	// logs record this one.
	HeaderRequestID = "X-Request-Id"
	// HeaderClientRequestID echoes a sane X-Request-Id the client sent, so
	// that it can correlate; billingd records it only in the access log.
	HeaderClientRequestID = "X-Client-Request-Id"
)

const routeUnmatched = "unmatched"

// exchange is what the edge learns about a request while it is served:
// handlers fill in the route and caller, the edge logs them.
type exchange struct {
	id, clientID   string
	route          string
	org, principal string
}

type exchangeKey struct{}

func withExchange(ctx context.Context, ex *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, ex)
}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// SetRoute names the route template that served the request
// ("/api/billing/confirmations/:id/cancel"), for its log line and metric.
// It must never be the raw path. Outside the edge it does nothing.
func SetRoute(ctx context.Context, route string) {
	if ex := exchangeOf(ctx); ex != nil {
		ex.route = route
	}
}

// setCaller records the authenticated caller for the access log.
func setCaller(ctx context.Context, org, principal string) {
	if ex := exchangeOf(ctx); ex != nil {
		ex.org, ex.principal = org, principal
	}
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// clientRequestID is the client's X-Request-Id when it is short and plain
// enough to log and echo, else "". It is never billingd's id: anyone could
// otherwise make unrelated audit events look related.
func clientRequestID(r *http.Request) string {
	if id := r.Header.Get(HeaderRequestID); requestIDPattern.MatchString(id) {
		return id
	}
	return ""
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

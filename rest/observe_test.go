package rest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/httpedge"
)

// recordingObserver keeps what the edge reports.
type recordingObserver struct {
	mu       sync.Mutex
	requests []string
}

func (o *recordingObserver) ObserveRequest(method, route string, status int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests = append(o.requests, method+" "+route+" "+http.StatusText(status))
}

// TestRequestsObservedByRouteTemplate: behind the edge, requests are
// reported under the route's template, and paths no route serves under one
// "unmatched" label, so that ids in paths and scanners cannot mint new time
// series.
func TestRequestsObservedByRouteTemplate(t *testing.T) {
	obs := &recordingObserver{}
	edge := httpedge.New(httpedge.Config{Observer: obs}, New(Config{}))
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/healthz", "GET /healthz OK"},
		{"POST", "/api/billing/confirmations/cfm_abc/cancel", "POST /api/billing/confirmations/:id/cancel Unauthorized"},
		{"GET", "/api/billing/nothing-here", "GET unmatched Not Found"},
		{"GET", "/wp-login.php", "GET unmatched Not Found"},
		{"GET", "/assets/secret.txt", "GET /assets/:name Not Found"},
	} {
		obs.requests = nil
		edge.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(c.method, c.path, nil))
		if len(obs.requests) != 1 || obs.requests[0] != c.want {
			t.Errorf("%s %s observed as %q, want %q", c.method, c.path, obs.requests, c.want)
		}
	}
}

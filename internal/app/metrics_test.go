package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/billingd/billingd/internal/telemetry"
)

// The profiler is served only when PPROF asks for it, and only on the
// metrics listener's handler.
func TestMetricsHandlerServesPprofOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		h := MetricsHandler(telemetry.New(), tc.pprof)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil))
		if rec.Code != tc.want {
			t.Errorf("pprof=%v: GET /debug/pprof/cmdline = %d, want %d", tc.pprof, rec.Code, tc.want)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("pprof=%v: GET /metrics = %d", tc.pprof, rec.Code)
		}
	}
}

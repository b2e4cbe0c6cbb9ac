package mcp

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMCPByProtocol: requests of 2026-07-28 and later reach the stateless
// handler, everything else the stateful one.
func TestMCPByProtocol(t *testing.T) {
	mark := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", name) })
	}
	router := byProtocol{legacy: mark("legacy"), modern: mark("modern")}
	for version, want := range map[string]string{
		"": "legacy", "2024-11-05": "legacy", "2025-06-18": "legacy", "2025-11-25": "legacy",
		"2026-07-28": "modern", "2027-01-01": "modern",
	} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		if version != "" {
			r.Header.Set("Mcp-Protocol-Version", version)
		}
		w := httptest.NewRecorder()
		router.ServeHTTP(w, r)
		if got := w.Header().Get("X-Handler"); got != want {
			t.Errorf("version %q: %s, want %s", version, got, want)
		}
	}
}

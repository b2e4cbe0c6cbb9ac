package integration

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestDashboardServed: the page and its assets come with the browser
// security headers, and the page has no inline script for the CSP to allow.
func TestDashboardServed(t *testing.T) {
	h := newHarness(t)
	page := h.do("GET", "/", "", nil)
	wantStatus(t, page, http.StatusOK, "")
	for _, path := range []string{"/", "/assets/dashboard.js", "/assets/dashboard.css"} {
		r := h.do("GET", path, "", nil)
		wantStatus(t, r, http.StatusOK, "")
		csp := r.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("%s: Content-Security-Policy %q allows unsafe sources", path, csp)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, r.Header)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(string(page.Body), -1) {
		if !strings.Contains(tag, `src="/assets/dashboard.js`) {
			t.Errorf("inline or foreign script: %s", tag)
		}
	}
	if ct := h.do("GET", "/assets/dashboard.js", "", nil).Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("script served as %q", ct)
	}
	wantStatus(t, h.do("GET", "/assets/dashboard.html", "", nil), http.StatusNotFound, "not_found")
}

package integration

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// approvalPath is an approval page's address for a well-formed id that no
// confirmation has.
const approvalPath = "/approvals/cfm_AAAAAAAAAAAAAAAAAAAAAA"

// TestDashboardServed: the pages and their assets come with the browser
// security headers, and the pages have no inline script for the CSP to allow.
func TestDashboardServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	paths := []string{"/", approvalPath, "/assets/common.js", "/assets/receipt.js", "/assets/dashboard.js", "/assets/approval.js", "/assets/dashboard.css"}
	for _, path := range paths {
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
	wantOwnScripts(t, h.do("GET", "/", "", nil), "common.js", "receipt.js", "dashboard.js")
	wantOwnScripts(t, h.do("GET", approvalPath, "", nil), "common.js", "approval.js")
	if ct := h.do("GET", "/assets/dashboard.js", "", nil).Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("script served as %q", ct)
	}
	wantStatus(t, h.do("GET", "/assets/dashboard.html", "", nil), http.StatusNotFound, "not_found")
}

// TestDashboardApprovalPageRendersNoID: the approval page is the same bytes
// whatever the id in its address, so nothing from the path reaches the HTML.
func TestDashboardApprovalPageRendersNoID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	want := h.do("GET", approvalPath, "", nil)
	for _, id := range []string{"cfm_BBBBBBBBBBBBBBBBBBBBBB", "%3Cb%3Ehi%3C%2Fb%3E", "x%22onmouseover%3D1"} {
		r := h.do("GET", "/approvals/"+id, "", nil)
		wantStatus(t, r, http.StatusOK, "")
		if string(r.Body) != string(want.Body) {
			t.Errorf("/approvals/%s differs from %s", id, approvalPath)
		}
	}
}

// wantOwnScripts requires page to load exactly the named scripts from
// /assets/, in that order, and no inline script.
func wantOwnScripts(t *testing.T, page response, names ...string) {
	t.Helper()
	wantStatus(t, page, http.StatusOK, "")
	tags := regexp.MustCompile(`<script[^>]*>`).FindAllString(string(page.Body), -1)
	if len(tags) != len(names) {
		t.Fatalf("scripts %q, want %q", tags, names)
	}
	for i, tag := range tags {
		if !strings.Contains(tag, `src="/assets/`+names[i]+`?v=`) {
			t.Errorf("script %d is %s, want /assets/%s", i, tag, names[i])
		}
	}
}

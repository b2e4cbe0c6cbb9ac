package mcpbridge

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ raw, want, err string }{
		{"https://billing.example.com", "https://billing.example.com", ""},
		{"https://billing.example.com/base/", "https://billing.example.com/base", ""},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{"http://localhost:8080", "http://localhost:8080", ""},
		{"http://[::1]:8080", "http://[::1]:8080", ""},
		{"", "", "BILLINGD_URL is required"},
		{"billing.example.com", "", "not an http(s) URL"},
		{"http://billing.example.com", "", "https is required"},
		{"http://127.0.0.1.example.com", "", "https is required"},
		{"ftp://127.0.0.1", "", "scheme"},
		{"https://user:pw@billing.example.com", "", "not an http(s) URL"},
		{"https://billing.example.com/?x=1", "", "not an http(s) URL"},
	} {
		u, err := ParseURL(c.raw)
		switch {
		case c.err == "" && (err != nil || u.String() != c.want):
			t.Errorf("ParseURL(%q) = %v, %v; want %s", c.raw, u, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "BILLINGD_URL")):
			t.Errorf("ParseURL(%q) error %v, want one naming BILLINGD_URL and %q", c.raw, err, c.err)
		}
	}
}

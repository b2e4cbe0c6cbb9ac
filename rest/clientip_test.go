package rest

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestClientIP: X-Forwarded-For names the client only when the peer is a
// configured proxy, and then by its rightmost hop that is not one; a
// loopback or private peer is not trusted for being one (Echo's default).
func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     string
		want    string
	}{
		{"no proxies: loopback peer's header ignored", nil, "127.0.0.1:5000", "198.51.100.1", "127.0.0.1"},
		{"no proxies: private peer's header ignored", nil, "10.0.0.9:5000", "198.51.100.1", "10.0.0.9"},
		{"untrusted private peer", proxies, "10.0.0.9:5000", "198.51.100.1", "10.0.0.9"},
		{"trusted peer names the client", proxies, "127.0.0.1:5000", "198.51.100.1", "198.51.100.1"},
		{"rightmost untrusted hop, not what the client wrote", proxies, "127.0.0.1:5000", "1.1.1.1, 198.51.100.1", "198.51.100.1"},
		{"a private client behind the proxy is the client", proxies, "127.0.0.1:5000", "1.1.1.1, 10.0.0.9", "10.0.0.9"},
		{"proxies chained", proxies, "127.0.0.1:5000", "198.51.100.1, fd00::7", "198.51.100.1"},
		{"IPv6 client", proxies, "[fd00::1]:5000", "2001:db8::1", "2001:db8::1"},
		{"trusted peer without header", proxies, "127.0.0.1:5000", "", "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/auth/login", nil)
			r.RemoteAddr = tt.peer
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			if got := clientIP(tt.trusted)(r); got != tt.want {
				t.Errorf("client %q, want %q", got, tt.want)
			}
		})
	}
}

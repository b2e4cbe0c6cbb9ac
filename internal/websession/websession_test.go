package websession

import "testing"

// TestAddressBucket: an IPv4 address is counted by itself (also when it
// arrives IPv4-mapped), an IPv6 address by its /64, so that one host
// cycling through the addresses of its /64 is one client.
func TestAddressBucket(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"", "unknown"},
		{"not an address", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := AddressBucket(tt.addr); got != tt.want {
				t.Errorf("AddressBucket(%q) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

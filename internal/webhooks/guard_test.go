package webhooks

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1:248:1893:25c8:1946": true, "8.8.8.8": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "100.64.0.1": false, "100.127.255.254": false, "0.0.0.0": false,
		"224.0.0.1": false, "255.255.255.255": false, "::1": false, "::": false, "fe80::1": false,
		"fc00::1": false, "fd12::1": false, "ff02::1": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::ffff:169.254.169.254": false, "::ffff:8.8.8.8": true,
		"64:ff9b::a00:1": false, "198.18.0.1": false, "240.0.0.1": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %t, want %t", addr, got, want)
		}
	}
}

// fakeResolver answers from a table; answers, when set, gives the n-th
// lookup's answer (a name that rebinds).
type fakeResolver struct {
	table   map[string][]netip.Addr
	answers func(n int64) []netip.Addr
	lookups atomic.Int64
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n := r.lookups.Add(1)
	if r.answers != nil {
		return r.answers(n), nil
	}
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestCheckURL(t *testing.T) {
	r := &fakeResolver{table: map[string][]netip.Addr{
		"hooks.example.com":   addrs("93.184.216.34"),
		"internal.example":    addrs("10.0.0.7"),
		"mixed.example":       addrs("93.184.216.34", "127.0.0.1"),
		"metadata.example":    addrs("169.254.169.254"),
		"cgnat.example":       addrs("100.64.1.1"),
		"mapped.example":      addrs("::ffff:127.0.0.1"),
		"localhost.example":   addrs("::1"),
		"unspecified.example": addrs("0.0.0.0"),
	}}
	strict := Guard{Resolver: r}
	loose := Guard{Resolver: r, AllowPrivate: true}
	for _, tc := range []struct {
		url            string
		strict, loose  bool // accepted
		refusedAddress bool
	}{
		{"https://hooks.example.com/billing", true, true, false},
		{"http://hooks.example.com/billing", false, true, false},
		{"https://internal.example/", false, true, true},
		{"https://mixed.example/", false, true, true},
		{"https://metadata.example/", false, true, true},
		{"https://cgnat.example/", false, true, true},
		{"https://mapped.example/", false, true, true},
		{"https://localhost.example/", false, true, true},
		{"https://unspecified.example/", false, true, true},
		{"https://127.0.0.1/", false, true, true},
		{"https://[::1]:8443/", false, true, true},
		{"https://[::ffff:10.0.0.1]/", false, true, true},
		{"https://user:pass@hooks.example.com/", false, false, false},
		{"ftp://hooks.example.com/", false, false, false},
		{"hooks.example.com/x", false, false, false},
		{"https://nxdomain.example/", false, false, false},
	} {
		err := strict.CheckURL(context.Background(), tc.url)
		if (err == nil) != tc.strict {
			t.Errorf("strict CheckURL(%s) = %v, want accepted %t", tc.url, err, tc.strict)
		}
		if tc.refusedAddress && !errors.Is(err, ErrRefusedAddress) {
			t.Errorf("strict CheckURL(%s) = %v, want ErrRefusedAddress", tc.url, err)
		}
		if err := loose.CheckURL(context.Background(), tc.url); (err == nil) != tc.loose {
			t.Errorf("with private networks allowed, CheckURL(%s) = %v, want accepted %t", tc.url, err, tc.loose)
		}
	}
}

// TestDialRefusesRebinding: a name public when the endpoint was checked and
// loopback when the delivery connects is refused at the connection, and
// the receiver behind it never hears a thing.
func TestDialRefusesRebinding(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	r := &fakeResolver{answers: func(n int64) []netip.Addr {
		if n == 1 {
			return addrs("93.184.216.34")
		}
		return addrs("127.0.0.1")
	}}
	g := Guard{Resolver: r}
	if err := g.CheckURL(context.Background(), "https://rebind.example/"); err != nil {
		t.Fatalf("creation-time check: %v", err)
	}
	_, err := g.Client(2*time.Second).Post("https://rebind.example:"+strconv.Itoa(port)+"/", "application/json", nil)
	if !errors.Is(err, ErrRefusedAddress) {
		t.Fatalf("delivery to a name now resolving to loopback: %v, want ErrRefusedAddress", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the loopback receiver was reached")
	}
	// Allowed, the same client reaches it (plain http, as in tests).
	allowed := Guard{Resolver: r, AllowPrivate: true}
	resp, err := allowed.Client(2*time.Second).Post("http://rebind.example:"+strconv.Itoa(port)+"/", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Fatal("with private networks allowed the receiver was not reached")
	}
}

// TestClientFollowsNoRedirect: a redirect is the receiver's answer, never a
// new destination (it could point inside the network).
func TestClientFollowsNoRedirect(t *testing.T) {
	var inner atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { inner.Add(1) }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	resp, err := Guard{AllowPrivate: true}.Client(2*time.Second).Post(redirect.URL, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || inner.Load() != 0 {
		t.Fatalf("status %d, redirect target reached %d times", resp.StatusCode, inner.Load())
	}
}

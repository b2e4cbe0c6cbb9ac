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

// TestPublicAgainstIANARegistries takes one address from every entry of
// IANA's IPv4 and IPv6 special-purpose address registries that is not
// globally reachable (or whose reachability is N/A), every IPv4-embedding
// IPv6 form with a loopback or private IPv4 address inside, and ranges
// that are not global unicast at all; each must be refused. The controls
// are globally reachable addresses, accepted. Entries the registries mark
// globally reachable but that serve no webhook receiver (anycast relays,
// AS112, AMT, ORCHIDv2) are refused too, as the library does: stricter is
// allowed, looser is not.
func TestPublicAgainstIANARegistries(t *testing.T) {
	refused := []struct{ addr, entry string }{
		// IPv4 special-purpose registry.
		{"0.1.2.3", "0.0.0.0/8 this network"},
		{"0.0.0.0", "0.0.0.0/32 this host on this network"},
		{"10.1.2.3", "10.0.0.0/8 private-use"},
		{"100.64.0.1", "100.64.0.0/10 shared address space"},
		{"100.127.255.254", "100.64.0.0/10 shared address space"},
		{"127.0.0.1", "127.0.0.0/8 loopback"},
		{"169.254.169.254", "169.254.0.0/16 link local"},
		{"172.16.0.1", "172.16.0.0/12 private-use"},
		{"192.0.0.100", "192.0.0.0/24 IETF protocol assignments"},
		{"192.0.0.1", "192.0.0.0/29 IPv4 service continuity prefix"},
		{"192.0.0.8", "192.0.0.8/32 IPv4 dummy address"},
		{"192.0.0.170", "192.0.0.170/32 NAT64/DNS64 discovery"},
		{"192.0.0.171", "192.0.0.171/32 NAT64/DNS64 discovery"},
		{"192.0.2.1", "192.0.2.0/24 documentation (TEST-NET-1)"},
		{"192.88.99.1", "192.88.99.0/24 deprecated 6to4 relay anycast"},
		{"192.168.1.1", "192.168.0.0/16 private-use"},
		{"198.18.0.1", "198.18.0.0/15 benchmarking"},
		{"198.51.100.1", "198.51.100.0/24 documentation (TEST-NET-2)"},
		{"203.0.113.1", "203.0.113.0/24 documentation (TEST-NET-3)"},
		{"240.0.0.1", "240.0.0.0/4 reserved"},
		{"255.255.255.255", "255.255.255.255/32 limited broadcast"},
		{"224.0.0.1", "224.0.0.0/4 multicast (not unicast)"},
		// IPv6 special-purpose registry.
		{"::1", "::1/128 loopback"},
		{"::", "::/128 unspecified"},
		{"::ffff:127.0.0.1", "::ffff:0:0/96 IPv4-mapped, of loopback"},
		{"::ffff:10.0.0.1", "::ffff:0:0/96 IPv4-mapped, of private-use"},
		{"::ffff:169.254.169.254", "::ffff:0:0/96 IPv4-mapped, of link local"},
		{"64:ff9b::7f00:1", "64:ff9b::/96 IPv4-IPv6 translation (NAT64), of loopback"},
		{"64:ff9b::a00:1", "64:ff9b::/96 IPv4-IPv6 translation (NAT64), of private-use"},
		{"64:ff9b:1::a00:1", "64:ff9b:1::/48 local-use IPv4/IPv6 translation"},
		{"100::1", "100::/64 discard-only"},
		{"100:0:0:1::1", "100:0:0:1::/64 dummy IPv6 prefix"},
		{"2001:4::1", "2001::/23 IETF protocol assignments"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "2001::/32 Teredo (of 127.0.0.1)"},
		{"2001:2::1", "2001:2::/48 benchmarking"},
		{"2001:10::1", "2001:10::/28 deprecated ORCHID"},
		{"2001:db8::1", "2001:db8::/32 documentation"},
		{"2002:7f00:1::1", "2002::/16 6to4 (of 127.0.0.1)"},
		{"2002:a00:1::1", "2002::/16 6to4 (of 10.0.0.1)"},
		{"3fff::1", "3fff::/20 documentation"},
		{"5f00::1", "5f00::/16 segment routing (SRv6) SIDs"},
		{"fc00::1", "fc00::/7 unique-local"},
		{"fd12::1", "fc00::/7 unique-local"},
		{"fe80::1", "fe80::/10 link-local unicast"},
		// Not global unicast: deprecated forms and multicast.
		{"fec0::1", "fec0::/10 deprecated site-local"},
		{"::127.0.0.1", "::/96 deprecated IPv4-compatible, of loopback"},
		{"::8.8.8.8", "::/96 deprecated IPv4-compatible"},
		{"::ffff:0:7f00:1", "::ffff:0:0:0/96 IPv4-translated (RFC 2765), of loopback"},
		{"ff02::1", "ff00::/8 multicast"},
		{"4000::1", "outside 2000::/3, the global unicast space"},
		{"2606:4700::1%eth0", "a zone: scoped, never global"},
	}
	for _, c := range refused {
		if Public(netip.MustParseAddr(c.addr)) {
			t.Errorf("Public(%s) = true, want refused: %s", c.addr, c.entry)
		}
	}
	for _, addr := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "192.0.1.1", "198.20.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001:800::200e", "2600::1",
		"::ffff:8.8.8.8", // IPv4-mapped: judged as the IPv4 address it is
	} {
		if !Public(netip.MustParseAddr(addr)) {
			t.Errorf("Public(%s) = false, want accepted: globally reachable", addr)
		}
	}
	if Public(netip.Addr{}) {
		t.Error("the zero address is accepted")
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

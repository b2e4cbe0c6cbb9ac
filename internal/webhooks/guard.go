package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"code.dny.dev/ssrf"
)

// Resolver resolves a host name to addresses; *net.Resolver is one, tests
// inject others (an answer that changes between checks: DNS rebinding).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard keeps billingd from being made to call into its own network (SSRF):
// endpoint URLs must be https and every address their host resolves to
// globally reachable (Public). The addresses are checked when an endpoint
// is created and again when each delivery connects, to the very address it
// connects to, so a name that resolved to a public address at creation and
// to a private one later (DNS rebinding) is refused.
type Guard struct {
	// AllowPrivate (WEBHOOK_ALLOW_PRIVATE_NETWORKS) allows http and any
	// address: tests and billingd dev.
	AllowPrivate bool
	// Resolver resolves hosts; nil: net.DefaultResolver.
	Resolver Resolver
}

// ErrRefusedAddress: the URL's host is, or resolves to, an address that is
// not public.
var ErrRefusedAddress = errors.New("webhook URL resolves to an address that is not public")

func (g Guard) resolver() Resolver {
	if g.Resolver == nil {
		return net.DefaultResolver
	}
	return g.Resolver
}

// CheckURL checks an endpoint URL: absolute, https (http too when private
// networks are allowed), no credentials, and a host that resolves to public
// addresses only.
func (g Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return errors.New("not an absolute URL")
	}
	if u.User != nil {
		return errors.New("a webhook URL may not carry credentials")
	}
	if u.Scheme != "https" && !(g.AllowPrivate && u.Scheme == "http") {
		return errors.New("webhook URLs must be https")
	}
	_, err = g.publicAddrs(ctx, u.Hostname())
	return err
}

// publicAddrs resolves host and returns its addresses, or an error unless
// every one of them may be called.
func (g Guard) publicAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := g.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if !g.AllowPrivate && !Public(a) {
			return nil, ErrRefusedAddress
		}
	}
	return addrs, nil
}

func (g Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve webhook host: %w", err)
	}
	if len(addrs) == 0 {
		return nil, errors.New("resolve webhook host: no addresses")
	}
	return addrs, nil
}

// registry refuses every address that IANA's IPv4 and IPv6 special-purpose
// address registries do not mark globally reachable, and every IPv6
// address outside the global unicast space 2000::/3: code.dny.dev/ssrf's
// tables are generated from those registries. Its checks of ports and
// networks are off here; the guard judges addresses only.
//
// The library does not decode IPv4-embedding IPv6 forms; it refuses each
// whole range instead, whatever it embeds: IPv4-compatible (::/96) and
// IPv4-translated (::ffff:0:0:0/96) lie outside 2000::/3, so do NAT64's
// 64:ff9b::/96 and 64:ff9b:1::/48, and 6to4 (2002::/16) and Teredo
// (2001::/32, within 2001::/23) are denied prefixes. A translator or relay
// decides where such an address leads, not billingd, so refusing them all
// is stricter than decoding them, and decoding one could only refuse it
// again. The one form decoded is IPv4-mapped (::ffff:0:0/96), which the
// dialer connects to as the IPv4 address it is (Public unmaps it first).
//
// srv6 is IANA's 5f00::/16 (segment routing SIDs, RFC 9602, not globally
// reachable), registered after the library's last release.
var registry = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork(),
	ssrf.WithDeniedV6Prefixes(netip.MustParsePrefix("5f00::/16")))

// Public reports whether a is a globally reachable unicast address by
// IANA's special-purpose registries (see registry). An IPv4-mapped IPv6
// address is judged as its IPv4 address; an address with a zone is scoped
// to one link, never global.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	return registry.SafeAddr(a) == nil
}

// DialContext connects to addr ("host:port") only through addresses the
// guard allows, resolving the host itself and dialing the checked address,
// so that nothing resolves it again in between.
func (g Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := g.publicAddrs(ctx, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	var last error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, last
}

// Client is the HTTP client deliveries are sent with: connections through
// the guard, no proxy (a proxy would connect on our behalf, unchecked), no
// redirects followed (a redirect is the receiver's answer, not a new
// destination), and timeout for the whole exchange.
func (g Guard) Client(timeout time.Duration) *http.Client {
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

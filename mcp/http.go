package mcp

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/httpedge"
	"github.com/billingd/billingd/internal/requestid"
)

// maxRequestBytes bounds an MCP request body, as REST bounds its bodies.
const maxRequestBytes = 64 << 10

// sessionIdleTimeout closes MCP sessions nobody has used for a while, so that
// abandoned sessions do not pile up in memory. Nothing is lost: a session
// holds no confirmation state, and clients open a new one.
const sessionIdleTimeout = 30 * time.Minute

// Handler returns the Streamable HTTP endpoint to mount at /mcp, behind
// internal/httpedge (request id, body limit, access log, headers, error
// envelope). From the outside in: the request id for the audit log,
// DNS-rebinding protection, the bearer token (the edge's Bearer, which
// REST uses too: one challenge, one envelope), the SDK's token info, the
// scope gate, and the SDK's handlers, one per protocol generation
// (byProtocol).
func Handler(cfg Config) http.Handler {
	server := newServer(cfg, stateSealerFor(cfg))
	metadata := cfg.PublicBaseURL + "/.well-known/oauth-protected-resource/mcp"
	public := publicHost(cfg.PublicBaseURL)
	getServer := func(*http.Request) *sdk.Server { return server }
	options := func(stateless bool) *sdk.StreamableHTTPOptions {
		o := &sdk.StreamableHTTPOptions{
			Stateless:           stateless,
			Logger:              cfg.logger(),
			MaxRequestBodyBytes: maxRequestBytes,
			// Replaced by hostGuard when PUBLIC_BASE_URL names a public host.
			DisableLocalhostProtection: public != "",
		}
		if !stateless {
			o.SessionTimeout = sessionIdleTimeout
		}
		return o
	}
	var h http.Handler = byProtocol{
		legacy: sdk.NewStreamableHTTPHandler(getServer, options(false)),
		modern: sdk.NewStreamableHTTPHandler(getServer, options(true)),
	}
	h = scopeGate{next: h, metadata: metadata}
	h = sdkauth.RequireBearerToken(verifiedByEdge, nil)(h)
	h = httpedge.Bearer{Verifier: cfg.Verifier, Logger: cfg.logger()}.Require(metadata, toolScopeList...)(h)
	if public != "" {
		h = hostGuard(h, public)
	}
	return withRequestID(h)
}

// protocol20260728 is the first protocol version of the stateless
// generation (SEP-2575): no sessions, and tools ask for input in their
// results (SEP-2322) instead of by server-to-client requests.
const protocol20260728 = "2026-07-28"

// byProtocol serves both protocol generations at one URL, because the SDK
// (v1.8.0) serves each with a different handler:
//
//   - The stateful handler (sessions, Mcp-Session-Id) speaks up to
//     2025-11-25, which npm clients use; a server-to-client request, such as
//     an elicitation, needs its session. It refuses any 2026-07-28 request
//     except server/discover, and its discover answer lists only the older
//     versions (StreamableServerTransport.SupportsProtocolVersion), so a
//     2026-07-28 client negotiates down.
//   - The stateless handler speaks 2026-07-28 (SEP-2575: no initialize,
//     version and capabilities in every request's _meta), where a tool asks
//     for input in its result (multi-round-trip) instead of by a
//     server-to-client request, which a stateless session cannot make. It
//     could answer older clients too, but could not elicit from them.
//
// A 2026-07-28 client sends Mcp-Protocol-Version: 2026-07-28 on every
// request, server/discover included, and never a session id; older clients
// send no version on initialize and the negotiated one afterwards. So the
// header alone picks the handler, and each client gets elicitation in its
// own protocol. Sessions live in this process (replicas need routing by
// Mcp-Session-Id); 2026-07-28 calls have no session and may land on any
// replica. A confirmation never depends on either.
type byProtocol struct {
	legacy, modern http.Handler
}

func (b byProtocol) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Mcp-Protocol-Version") >= protocol20260728 {
		b.modern.ServeHTTP(w, r)
		return
	}
	b.legacy.ServeHTTP(w, r)
}

// verifiedByEdge hands the identity httpedge.Bearer verified to the SDK,
// whose RequireBearerToken is the only way to attach the token info its
// sessions and tools read (the context key is the SDK's). Every request
// that reaches it carries a verified identity, so the SDK never answers a
// refusal itself.
func verifiedByEdge(_ context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
	id, ok := httpedge.IdentityFrom(r.Context())
	if !ok {
		return nil, sdkauth.ErrInvalidToken
	}
	return tokenInfo(id), nil
}

// toolScopeList is every scope some tool needs, in the order clients see it
// in the 401 challenge (the MCP spec asks for it, so that a client requests
// the right ones).
var toolScopeList = []string{auth.ScopeRead, auth.ScopeWrite}

// withRequestID puts billingd's request id on the request's header, where
// tools read it (req.Extra.Header; a tool's context is the session's, not
// the request's). Behind the edge it is the edge's id; standalone, the
// handler makes one. Never the client's X-Request-Id.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestid.From(r.Context())
		if id == "" {
			id = newRequestID()
			r = r.WithContext(requestid.With(r.Context(), id))
			w.Header().Set(requestIDHeader, id)
		}
		r.Header.Set(requestIDHeader, id)
		next.ServeHTTP(w, r)
	})
}

// publicHost is the host name of PUBLIC_BASE_URL when it is not a loopback
// name, i.e. when billingd is reached under a public name (usually through a
// reverse proxy); "" otherwise.
func publicHost(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil || isLoopback(u.Hostname()) {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// hostGuard is the SDK's DNS-rebinding protection, widened by one name. The
// SDK refuses any request that reaches a loopback listener with a Host that
// is not a loopback name, which also refuses a same-host reverse proxy that
// forwards the public Host. A rebinding page can only send its own host
// name, never PUBLIC_BASE_URL's, so admitting that one name keeps the
// protection.
func hostGuard(next http.Handler, public string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if local != nil && isLoopback(local.String()) && !isLoopback(host) && !strings.EqualFold(host, public) {
			httpedge.WriteError(w, r, billing.Errorf(billing.CodeOperationDenied, "the Host header does not name this server"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether addr (a host, or host:port) is localhost or a
// loopback IP.
func isLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/internal/auth"
)

// maxRequestBytes bounds an MCP request body, as REST bounds its bodies.
const maxRequestBytes = 64 << 10

// sessionIdleTimeout closes MCP sessions nobody has used for a while, so that
// abandoned sessions do not pile up in memory. Nothing is lost: a session
// holds no confirmation state, and clients open a new one.
const sessionIdleTimeout = 30 * time.Minute

// Handler returns the Streamable HTTP endpoint to mount at /mcp. From the
// outside in: a request id for the audit log, DNS-rebinding protection, the
// bearer token (the SDK's RequireBearerToken with internal/auth), the scope
// gate, and the SDK's handlers, one per protocol generation (byProtocol).
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
	h = sdkauth.RequireBearerToken(verifyWith(cfg.Verifier, cfg.logger()),
		&sdkauth.RequireBearerTokenOptions{ResourceMetadataURL: metadata})(h)
	h = completeChallenge(h, metadata)
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

// verifyWith adapts internal/auth to the SDK. The SDK writes the error's text
// into the 401 body, so a refusal returns the bare sentinel and the reason
// goes to the log only.
func verifyWith(v Verifier, log *slog.Logger) sdkauth.TokenVerifier {
	return func(ctx context.Context, raw string, r *http.Request) (*sdkauth.TokenInfo, error) {
		id, err := v.Verify(ctx, raw)
		if err == nil {
			return tokenInfo(id), nil
		}
		log.InfoContext(ctx, "access token refused", "request_id", r.Header.Get(requestIDHeader), "reason", err)
		if errors.Is(err, auth.ErrInvalidToken) {
			return nil, sdkauth.ErrInvalidToken
		}
		return nil, errors.New("access token verification failed")
	}
}

// toolScopeList is every scope some tool needs, in the order clients see it.
var toolScopeList = []string{auth.ScopeRead, auth.ScopeWrite}

// completeChallenge rewrites the SDK's 401 challenge, which names only the
// metadata URL, into the one REST sends (contract §4): error="invalid_token"
// when a token was presented (RFC 6750) and the scopes the tools need, which
// the MCP spec asks for so that a client requests the right ones.
func completeChallenge(next http.Handler, metadata string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		value := fmt.Sprintf(`Bearer resource_metadata="%s", scope="%s"`, metadata, strings.Join(toolScopeList, " "))
		if r.Header.Get("Authorization") != "" {
			value = fmt.Sprintf(`Bearer error="invalid_token", resource_metadata="%s", scope="%s"`, metadata, strings.Join(toolScopeList, " "))
		}
		next.ServeHTTP(&challengeWriter{ResponseWriter: w, challenge: value}, r)
	})
}

type challengeWriter struct {
	http.ResponseWriter
	challenge string
}

func (w *challengeWriter) WriteHeader(status int) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", w.challenge)
	}
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the flusher the SDK streams
// server-sent events with.
func (w *challengeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// withRequestID puts the request id on the request, where tools read it
// (req.Extra.Header). Under rest.New the REST middleware has already chosen
// it (a sane X-Request-Id from the client, or a new one) and echoed it on the
// response; standalone, the handler makes one and never trusts the client's.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := w.Header().Get(requestIDHeader)
		if id == "" {
			id = newRequestID()
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
			http.Error(w, "Forbidden: invalid Host header", http.StatusForbidden)
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

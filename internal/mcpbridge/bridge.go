// Package mcpbridge is billingd mcp stdio: MCP over stdin/stdout for a local
// agent, relayed to a running billingd's /mcp over Streamable HTTP with the
// agent's bearer token (contract §2).
//
// The bridge holds nothing but the server's URL and that token, so whatever
// can read an agent's MCP configuration can do no more than the token
// allows: no database URL, no Stripe key, no signing key ever reaches the
// agent's machine through it.
//
// It relays at the level of JSON-RPC messages (the SDK's Connection), not
// of MCP methods: every request, response and notification, in both
// directions, passes unchanged, the server's elicitation/create included.
// The agent and billingd negotiate the protocol and the session between
// them; the SDK's Streamable HTTP connection keeps the Mcp-Session-Id the
// server assigns at initialize. What the bridge adds is the bearer token,
// the negotiated Mcp-Protocol-Version header (the SDK's connection learns it
// only from its own client session, which a relay does not have), and
// answers of its own when billingd cannot give one: a refused token, an
// unreachable server, a lost connection. Those answer the agent's pending
// requests with a JSON-RPC error and end the bridge with an error naming
// BILLINGD_URL or BILLINGD_ACCESS_TOKEN, so an agent never waits on a
// server that is gone.
//
// billingd sends server-to-client messages only while it handles a call
// (on that call's stream), so the bridge opens no standalone SSE stream.
package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// JSON-RPC error codes of the bridge's own answers, next to the scope gate's
// -32030 (mcp/scopes.go) and clear of the codes the Go SDK gives meanings
// (-32001 to -32005, -32020 to -32022).
const (
	CodeTokenRefused = -32031 // billingd answered 401/403 without a JSON-RPC error
	CodeUnreachable  = -32032 // no answer from billingd: unreachable, or the connection was lost
)

// Timeouts that keep a dead or silent server from hanging the agent. There
// is no limit on a whole call: a tool may wait minutes for the user to
// answer an elicitation, but its stream's first event (that request) comes
// at once.
const (
	dialTimeout  = 10 * time.Second
	drainTimeout = 10 * time.Second
)

// responseHeaderTimeout bounds the wait for a response's first bytes; a
// variable so that a test need not wait minutes.
var responseHeaderTimeout = 2 * time.Minute

// Config is what the bridge needs: the two variables and the agent's pipes.
type Config struct {
	URL    *url.URL // BILLINGD_URL, checked by ParseURL
	Token  string   // BILLINGD_ACCESS_TOKEN
	In     io.Reader
	Out    io.Writer
	Logger *slog.Logger // never stdout: stdout carries only the protocol
}

// ParseURL checks BILLINGD_URL: an absolute http(s) URL without query or
// fragment. Plain http only to a loopback host, because the bearer token
// travels in every request.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("BILLINGD_URL is required: the running billingd's PUBLIC_BASE_URL")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("BILLINGD_URL %q is not an http(s) URL of a billingd (its PUBLIC_BASE_URL)", raw)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	case u.Scheme == "http":
		return nil, fmt.Errorf("BILLINGD_URL %q: https is required unless the host is loopback (the access token travels with every request)", raw)
	default:
		return nil, fmt.Errorf("BILLINGD_URL %q: the scheme must be https (or http to a loopback host)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Run relays between the agent on c.In/c.Out and billingd until the agent
// closes its end (nil) or the bridge cannot go on (an error naming the
// variable to check).
func Run(ctx context.Context, c Config) error {
	if c.Token == "" {
		return errors.New("BILLINGD_ACCESS_TOKEN is required: the agent's access token for this billingd")
	}
	b := newBridge(c)
	agent, err := (&sdk.IOTransport{Reader: io.NopCloser(c.In), Writer: nopWriteCloser{c.Out}}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp stdio: %w", err)
	}
	server, err := b.serverTransport().Connect(ctx)
	if err != nil {
		return fmt.Errorf("BILLINGD_URL %s: %w", c.URL, err)
	}
	b.agent, b.server = agent, server
	c.Logger.Info("billingd mcp stdio: relaying to billingd", "url", b.endpoint)
	return b.relay(ctx)
}

// bridge is one relay's state: the two connections and the agent's
// requests still waiting for billingd's answer.
type bridge struct {
	cfg      Config
	endpoint string
	headers  *headers
	agent    sdk.Connection
	server   sdk.Connection

	stop  context.CancelFunc
	calls sync.WaitGroup // calls being sent to billingd

	mu           sync.Mutex
	err          error // why the bridge stopped, if not because the agent left
	pending      map[jsonrpc.ID]bool
	settled      chan struct{} // a pending call was answered
	initializeID jsonrpc.ID
}

func newBridge(c Config) *bridge {
	return &bridge{cfg: c, endpoint: c.URL.String() + "/mcp", headers: &headers{token: c.Token, origin: c.URL},
		pending: map[jsonrpc.ID]bool{}, settled: make(chan struct{}, 1)}
}

// serverTransport is the Streamable HTTP client side: the token on every
// request, only to BILLINGD_URL's origin, no redirect followed (http.go),
// timeouts on connecting, no retries (billingd keeps no event store, so a
// broken stream cannot be resumed) and no standalone stream.
func (b *bridge) serverTransport() *sdk.StreamableClientTransport {
	dialer := &net.Dialer{Timeout: dialTimeout}
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true, // a custom dialer turns it off otherwise
	}
	b.headers.base = base
	return &sdk.StreamableClientTransport{
		Endpoint:             b.endpoint,
		HTTPClient:           &http.Client{Transport: b.headers, CheckRedirect: refuseRedirect},
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
	}
}

// relay runs both directions until one ends, then answers what is still
// pending and closes both sides.
func (b *bridge) relay(ctx context.Context) error {
	ctx, b.stop = context.WithCancel(ctx)
	defer b.stop()
	var wg sync.WaitGroup
	for _, direction := range []func(context.Context){b.toServer, b.toAgent} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer b.stop() // either side ending ends the other
			direction(ctx)
		}()
	}
	wg.Wait()
	b.calls.Wait() // their requests end with ctx; their answers get written
	err := b.failure()
	if err != nil {
		b.answerPending(err)
	}
	_ = b.server.Close() // ends the server session (DELETE, bounded by the SDK)
	_ = b.agent.Close()
	return err
}

// fail records why the bridge cannot go on (the first reason) and stops it.
func (b *bridge) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	b.stop()
}

func (b *bridge) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// toServer forwards the agent's messages until the agent closes stdin. Calls
// go out concurrently: a call's HTTP request returns only when its stream
// starts, and the agent must meanwhile be able to answer the elicitation
// that call may bring.
func (b *bridge) toServer(ctx context.Context) {
	for {
		msg, err := b.agent.Read(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				b.drain(ctx)
			} else if ctx.Err() == nil {
				b.fail(fmt.Errorf("mcp stdio: reading the agent's messages: %w", err))
			}
			return
		}
		req, isCall := msg.(*jsonrpc.Request)
		if !isCall || !req.IsCall() {
			if err := b.server.Write(ctx, msg); err != nil && ctx.Err() == nil {
				if fatal := b.fatal(err); fatal != nil {
					b.fail(fatal)
					return
				}
				b.cfg.Logger.Warn("billingd mcp stdio: a message to billingd was not delivered", "error", err)
			}
			continue
		}
		b.track(req)
		b.calls.Add(1)
		go func() {
			defer b.calls.Done()
			if err := b.server.Write(ctx, req); err != nil && ctx.Err() == nil {
				b.answer(req.ID, b.errorFor(err))
				if fatal := b.fatal(err); fatal != nil {
					b.fail(fatal)
				}
			}
		}()
	}
}

// drain waits, for a while, for the answers to calls the agent sent before
// it closed stdin (a script piping requests in wants them), so that closing
// stdin ends the bridge, as MCP's stdio shutdown asks, but not before.
func (b *bridge) drain(ctx context.Context) {
	deadline := time.After(drainTimeout)
	for {
		b.mu.Lock()
		idle := len(b.pending) == 0
		b.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-b.settled:
		}
	}
}

// toAgent forwards billingd's messages: responses, its requests
// (elicitation) and notifications. A failed read is a lost connection.
func (b *bridge) toAgent(ctx context.Context) {
	for {
		msg, err := b.server.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				b.fail(fmt.Errorf("BILLINGD_URL %s: the connection to billingd was lost: %s", b.cfg.URL, oneLine(err.Error())))
			}
			return
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && !b.claim(resp) {
			continue // the bridge answered it already
		}
		// Not ctx: an answer billingd gave is delivered even while the
		// bridge stops.
		if err := b.agent.Write(context.Background(), msg); err != nil {
			if ctx.Err() == nil {
				b.fail(fmt.Errorf("mcp stdio: writing to the agent: %w", err))
			}
			return
		}
		b.signalSettled()
	}
}

// track notes a call the agent is waiting on, and the initialize among them.
func (b *bridge) track(req *jsonrpc.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending[req.ID] = true
	if req.Method == "initialize" {
		b.initializeID = req.ID
	}
}

// claim takes a call off the pending list for billingd's answer, and
// reports whether it was still waiting. The answer to initialize names the
// protocol version later requests must declare; it is learnt before the
// agent can send one.
func (b *bridge) claim(resp *jsonrpc.Response) bool {
	b.mu.Lock()
	waiting := b.pending[resp.ID]
	delete(b.pending, resp.ID)
	isInitialize := b.initializeID.IsValid() && resp.ID == b.initializeID
	b.mu.Unlock()
	if isInitialize && resp.Error == nil {
		b.headers.learnVersion(resp.Result)
	}
	return waiting
}

// signalSettled wakes drain after an answer reached the agent.
func (b *bridge) signalSettled() {
	select {
	case b.settled <- struct{}{}:
	default:
	}
}

// answer gives the agent the bridge's own error for a call, once.
func (b *bridge) answer(id jsonrpc.ID, e *jsonrpc.Error) {
	b.mu.Lock()
	waiting := b.pending[id]
	delete(b.pending, id)
	b.mu.Unlock()
	if !waiting {
		return
	}
	if err := b.agent.Write(context.Background(), &jsonrpc.Response{ID: id, Error: e}); err != nil {
		b.cfg.Logger.Warn("billingd mcp stdio: could not answer the agent", "error", err)
	}
	b.signalSettled()
}

// answerPending answers every call still waiting when the bridge stops.
func (b *bridge) answerPending(cause error) {
	b.mu.Lock()
	ids := make([]jsonrpc.ID, 0, len(b.pending))
	for id := range b.pending {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.answer(id, &jsonrpc.Error{Code: CodeUnreachable, Message: oneLine(cause.Error())})
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

package mcpbridge

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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

// TestRelay runs the bridge in-process between the Go SDK's client and
// server (so the race detector sees it): the token reaches the server, a
// tool call and the elicitation it makes pass both ways, and closing the
// client's end ends the bridge without error.
func TestRelay(t *testing.T) {
	server := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	type in struct{}
	sdk.AddTool(server, &sdk.Tool{Name: "ask"}, func(ctx context.Context, req *sdk.CallToolRequest, _ in) (*sdk.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &sdk.ElicitParams{Message: "sure?", RequestedSchema: &jsonschema.Schema{Type: "object"}})
		if err != nil {
			return nil, nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.Action}}}, nil, nil
	})
	var tokens sync.Map
	handler := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		tokens.Store(r.Header.Get("Authorization"), true)
		return server
	}, nil)
	srv := httptest.NewServer(handler)
	defer srv.Close()

	cs, done := connectThroughBridge(t, srv.URL, &sdk.ClientOptions{
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ask", Arguments: map[string]any{}})
	if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "accept" {
		t.Fatalf("call through the bridge: %v %+v", err, res)
	}
	tokens.Range(func(k, _ any) bool {
		if k != "Bearer tok" {
			t.Errorf("a request reached the server with Authorization %q", k)
		}
		return true
	})
	_ = cs.Close()
	if err := <-done; err != nil {
		t.Fatalf("bridge after the client left: %v", err)
	}
}

// TestRelayRefused: a 401 with the contract's envelope answers the pending
// call with an error naming BILLINGD_ACCESS_TOKEN and the server's reason,
// and ends the bridge with an error saying the same.
func TestRelayRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"the access token has expired","request_id":"r1"}}`))
	}))
	defer srv.Close()
	done := connectThroughBridgeErr(t, srv.URL, "the access token has expired")
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "BILLINGD_ACCESS_TOKEN") || !strings.Contains(err.Error(), "the access token has expired") {
		t.Fatalf("bridge error %v", err)
	}
}

func connectThroughBridge(t *testing.T, url string, opts *sdk.ClientOptions) (*sdk.ClientSession, chan error) {
	t.Helper()
	transport, done := startBridge(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, opts).Connect(ctx, transport,
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	return cs, done
}

// connectThroughBridgeErr requires the connect to fail with an error naming
// BILLINGD_ACCESS_TOKEN and want.
func connectThroughBridgeErr(t *testing.T, url, want string) chan error {
	t.Helper()
	transport, done := startBridge(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, transport,
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil || !strings.Contains(err.Error(), "BILLINGD_ACCESS_TOKEN") || !strings.Contains(err.Error(), want) {
		t.Fatalf("connect through the bridge: %v, want an error naming BILLINGD_ACCESS_TOKEN and %q", err, want)
	}
	return done
}

// startBridge runs Run on pipes and returns the client's transport.
func startBridge(t *testing.T, rawURL string) (sdk.Transport, chan error) {
	t.Helper()
	u, err := ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	toBridge, clientOut := io.Pipe()
	clientIn, fromBridge := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := Run(context.Background(), Config{URL: u, Token: "tok", In: toBridge, Out: fromBridge,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		// As the process's exit would: the client's writes and reads fail.
		toBridge.Close()
		fromBridge.Close()
		done <- err
	}()
	return &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, done
}

// TestRelaySessionEnded: a session the server ended (billingd closes idle
// ones) is a lost connection: the call gets an error naming BILLINGD_URL at
// once and the bridge ends, so the host starts a new one.
func TestRelaySessionEnded(t *testing.T) {
	server := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{SessionTimeout: 50 * time.Millisecond}))
	defer srv.Close()
	cs, done := connectThroughBridge(t, srv.URL, nil)
	// Wait until the server has ended the idle session (50 ms after the
	// last request, when its timer gets to run), not for a guessed time.
	for deadline := time.Now().Add(10 * time.Second); len(slices.Collect(server.Sessions())) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not end the idle session within 10 s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err == nil || !strings.Contains(err.Error(), "BILLINGD_URL") {
		t.Fatalf("a call after the session ended: %v", err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "BILLINGD_URL") {
		t.Fatalf("bridge error %v", err)
	}
}

// TestRelaySilentServer: a call whose response does not start in time gets
// an error naming BILLINGD_URL, and the session goes on: the next call works.
func TestRelaySilentServer(t *testing.T) {
	defer func(d time.Duration) { responseHeaderTimeout = d }(responseHeaderTimeout)
	responseHeaderTimeout = 200 * time.Millisecond
	server := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	release := make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	type in struct{}
	sdk.AddTool(server, &sdk.Tool{Name: "hang"}, func(context.Context, *sdk.CallToolRequest, in) (*sdk.CallToolResult, any, error) {
		<-release
		return &sdk.CallToolResult{}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil))
	defer srv.Close() // waits for every handler: the hanging tool must be free by then
	defer free()
	cs, _ := connectThroughBridge(t, srv.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "hang", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), "BILLINGD_URL") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a call the server never answers: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	// Closing the session (DELETE) waits for the server's calls in flight:
	// the hanging one first.
	free()
	_ = cs.Close()
}

// TestRelayRefusesRedirect: billingd's URL (or a proxy in front of it)
// answering 307 to another origin ends the bridge with an error naming
// BILLINGD_URL and the redirect; the other origin never hears a request,
// so the agent's token stays with billingd.
func TestRelayRefusesRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	transport, done := startBridge(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, transport,
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("connect through a redirecting BILLINGD_URL: %v, want an error naming the redirect", err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "BILLINGD_URL") || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("bridge error %v, want one naming BILLINGD_URL and the redirect", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests", n)
	}
}

// TestTokenOnlyToBillingdsOrigin: the bridge's HTTP client, redirected
// from loopback http to plain http on another host (past the rule that
// plain http goes only to loopback), sends nothing there; and its
// transport refuses to put the token on any request for another origin.
func TestTokenOnlyToBillingdsOrigin(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://billingd.example/mcp", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	u, err := ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := newBridge(Config{URL: u, Token: "tok"})
	client := b.serverTransport().HTTPClient
	seen := &recorder{next: b.headers.base}
	b.headers.base = seen
	resp, err := client.Post(b.endpoint, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("a redirect to another host was followed")
	}
	for _, r := range seen.requests() {
		if r.URL.Host != u.Host {
			t.Errorf("a request went to %s with Authorization %q", r.URL.Host, r.Header.Get("Authorization"))
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "https://billingd.example/mcp", nil)
	if _, err := b.headers.RoundTrip(req); err == nil || len(seen.requests()) != 1 {
		t.Fatalf("the transport sent a request for another origin (%v, %d sent)", err, len(seen.requests()))
	}
}

// recorder notes the requests the bridge's transport sends, then sends them.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.sent = append(r.sent, req)
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

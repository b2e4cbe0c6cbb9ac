package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// billingd mcp stdio (issue 28) is a bridge to a running billingd's /mcp:
// the same scenarios run over Streamable HTTP and over the bridge, and the
// bridge gets no variable but BILLINGD_URL and BILLINGD_ACCESS_TOKEN.

// bridgeEnv is the whole environment of billingd mcp stdio: the two
// variables of contract §2, plus PATH and HOME as any process has them. No
// DATABASE_URL, no Stripe key, no issuer.
func bridgeEnv(baseURL, token string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"BILLINGD_URL=" + baseURL, "BILLINGD_ACCESS_TOKEN=" + token}
}

// lockedBuffer collects a subprocess's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bridge is one billingd mcp stdio process, as a client launches it.
type bridge struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
}

func newBridge(t *testing.T, baseURL, token string) *bridge {
	t.Helper()
	cmd := exec.Command(billingdBinary(t), "mcp", "stdio")
	cmd.Env = bridgeEnv(baseURL, token)
	b := &bridge{cmd: cmd, logs: &lockedBuffer{}}
	cmd.Stderr = b.logs
	return b
}

// dial connects the Go SDK's client over the bridge's stdio.
func (b *bridge) dial(version string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "billingd-integration", Version: "1"}, opts)
	return client.Connect(ctx, &sdk.CommandTransport{Command: b.cmd, TerminateDuration: 2 * time.Second},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
}

// exited is how the bridge ended, once the client's transport has waited
// for it (after a failed connect, or Close). A bridge that did not end by
// itself was stopped with SIGTERM by the client, which fails the test.
func (b *bridge) exited(t *testing.T) error {
	t.Helper()
	ps := b.cmd.ProcessState
	if ps == nil || !ps.Exited() {
		t.Fatalf("billingd mcp stdio did not exit by itself (%v): %s", ps, b.logs.String())
	}
	if ps.Success() {
		return nil
	}
	return &exec.ExitError{ProcessState: ps}
}

// mcpTransport connects the Go SDK's client to a harness's billingd.
type mcpTransport struct {
	name string
	dial func(t *testing.T, baseURL, token, version string, opts *sdk.ClientOptions) (*sdk.ClientSession, error)
}

var mcpTransports = []mcpTransport{
	{"http", func(_ *testing.T, baseURL, token, version string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
		return mcpDialWith(baseURL, token, version, opts, false)
	}},
	{"stdio", func(t *testing.T, baseURL, token, version string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
		b := newBridge(t, baseURL, token)
		cs, err := b.dial(version, opts)
		if err != nil {
			return nil, errors.Join(err, errors.New("bridge stderr: "+b.logs.String()))
		}
		t.Cleanup(func() {
			if strings.Contains(b.logs.String(), token) {
				t.Error("the access token reached the bridge's stderr")
			}
		})
		return cs, nil
	}},
}

func (tr mcpTransport) connect(t *testing.T, baseURL, token, version string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	cs, err := tr.dial(t, baseURL, token, version, opts)
	if err != nil {
		t.Fatalf("connect over %s: %v", tr.name, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestMCPTransports: the handshake, error results, a refused scope and
// elicitation in both protocol versions behave the same over Streamable
// HTTP and over billingd mcp stdio.
func TestMCPTransports(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for i, tr := range mcpTransports {
		org := func(name string) string { return name + "-" + tr.name }
		t.Run(tr.name+"/handshake", func(t *testing.T) {
			h.createOrg(org("hs"), "Local Dev", "pro")
			cs := tr.connect(t, h.url, h.mcpToken(org("hs"), "alice", "claude-code", auth.ScopeRead, auth.ScopeWrite), "", nil)
			tools, err := cs.ListTools(context.Background(), nil)
			if err != nil || len(tools.Tools) != len(billing.Offers())+4 { // contract §7, §15 and confirm_plan_change (§7.1)
				t.Fatalf("tools: %v %v", err, tools)
			}
			var p proposal
			first := callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"})
			wantSuccess(t, first, &p)
			if !strings.HasPrefix(p.Summary, "Upgrade Local Dev from Pro ($19/mo) to Scale ($49/mo).") || texts(first)[0] != p.Summary {
				t.Fatalf("first call: %+v", p)
			}
			var done executed
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
			if done.Subscription.Plan != "scale" || h.subscription(h.user(org("hs"), "alice")) != "scale" {
				t.Fatalf("second call: %+v", done)
			}
			for _, e := range h.auditEvents(org("hs")) {
				if e.Principal != "alice" || e.Client != "claude-code" || e.RequestID == "" {
					t.Fatalf("audit event %+v", e)
				}
			}
		})
		t.Run(tr.name+"/errors", func(t *testing.T) {
			h.createOrg(org("err"), "Errs", "pro")
			cs := tr.connect(t, h.url, h.mcpUser(org("err"), "erin"), "", nil)
			wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "gold"}), "unknown_plan")
			wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": "pbc_" + strings.Repeat("A", 43)}),
				"consent_token_invalid")
			if plan := mcpPlan(t, cs); plan != "pro" {
				t.Fatalf("plan %s after refusals", plan)
			}
		})
		t.Run(tr.name+"/missing scope", func(t *testing.T) {
			// Over HTTP a 403 with the call's JSON-RPC error; the bridge
			// relays that error, and the session goes on.
			h.createOrg(org("ro"), "Read Only", "pro")
			cs := tr.connect(t, h.url, h.mcpToken(org("ro"), "alice", "agent", auth.ScopeRead), "", nil)
			wantSuccess(t, callTool(t, cs, "list_plans", nil), nil)
			_, err := callToolErr(cs, "upgrade_plan", map[string]any{"to": "scale"})
			if err == nil || !strings.Contains(err.Error(), "insufficient_scope") {
				t.Fatalf("upgrade_plan with billing:read only: %v", err)
			}
			wantSuccess(t, callTool(t, cs, "get_subscription", nil), nil)
		})
		for j, version := range bothProtocols {
			t.Run(tr.name+"/elicitation/"+version, func(t *testing.T) {
				o := org("el" + string(rune('a'+i)) + string(rune('a'+j)))
				h.createOrg(o, "Conf", "pro")
				host := &host{h: h, token: h.user(o, "alice"), answer: answerWith("accept", map[string]any{"confirm": true})}
				opts := &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{Elicitation: formOnly}, ElicitationHandler: host.elicit}
				cs := tr.connect(t, h.url, h.mcpUser(o, "alice"), version, opts)
				if got := cs.InitializeResult().ProtocolVersion; got != version {
					t.Fatalf("negotiated %s, want %s", got, version)
				}
				var got changeOutcome
				raw := wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &got)
				dialog, pending := host.dialog(t)
				for _, summary := range pending {
					if dialog.Message != summary {
						t.Fatalf("dialog message %q\nis not the summary %q", dialog.Message, summary)
					}
				}
				if got.elicited() != "form:accept" || strings.Contains(string(raw), "pbc_") {
					t.Fatalf("elicitation %q: %s", got.elicited(), raw)
				}
				wantOutcome(t, h, o, got, true)
				h.wantConsent(o, h.lastExecuted(o), billing.ConsentElicitationForm, billing.HumanAttested)
			})
		}
	}
}

// TestMCPStdioRefused: a token billingd refuses reaches the agent as the
// answer to its first request, naming BILLINGD_ACCESS_TOKEN, and the bridge
// then exits non-zero with one line on stderr; the token never reaches it.
func TestMCPStdioRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cases := map[string]string{
		"garbage": "not-a-jwt",
		"expired": mint(t, h, devissuer.Claims{Subject: "alice", Org: "x", Scopes: []string{auth.ScopeRead},
			Audience: []string{h.url + "/mcp"}, TTL: -time.Minute}),
		"wrong audience": mint(t, h, devissuer.Claims{Subject: "alice", Org: "x", Scopes: []string{auth.ScopeRead},
			Audience: []string{"https://other.example/mcp"}}),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := runBridge(t, bridgeEnv(h.url, tok), initializeRequest+"\n")
			var answer struct {
				ID    int `json:"id"`
				Error struct {
					Code    int             `json:"code"`
					Message string          `json:"message"`
					Data    json.RawMessage `json:"data"`
				} `json:"error"`
			}
			if jsonErr := json.Unmarshal([]byte(stdout), &answer); jsonErr != nil || answer.ID != 1 ||
				!strings.Contains(answer.Error.Message, "BILLINGD_ACCESS_TOKEN") || !strings.Contains(answer.Error.Message, "401") ||
				!strings.Contains(string(answer.Error.Data), `"code":"unauthorized"`) {
				t.Fatalf("stdout %q: want the initialize answered by an error naming BILLINGD_ACCESS_TOKEN and the 401", stdout)
			}
			wantOneLineExit(t, err, stdout, stderr, "BILLINGD_ACCESS_TOKEN")
			if strings.Contains(stdout+stderr, tok) {
				t.Fatal("the token was echoed")
			}
		})
	}
}

// TestMCPStdioConfiguration: without its two variables, or with a
// BILLINGD_URL that is not an http(s) URL (or plain http to another host),
// the bridge exits at once with one line naming the variable, and writes
// nothing to stdout.
func TestMCPStdioConfiguration(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, url, token, names string }{
		{"no token", "http://127.0.0.1:1", "", "BILLINGD_ACCESS_TOKEN"},
		{"no URL", "", "tok", "BILLINGD_URL"},
		{"not a URL", "billingd.example.com", "tok", "BILLINGD_URL"},
		{"another scheme", "ftp://127.0.0.1/", "tok", "BILLINGD_URL"},
		{"plain http to another host", "http://billingd.example.com", "tok", "BILLINGD_URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, err := runBridge(t, bridgeEnv(c.url, c.token), initializeRequest+"\n")
			if stdout != "" {
				t.Fatalf("stdout %q", stdout)
			}
			wantOneLineExit(t, err, stdout, stderr, c.names)
		})
	}
}

// TestMCPStdioLostServer: a billingd that cannot be reached, at the start or
// after it went away mid-session, is an error the agent gets within seconds,
// and the bridge exits non-zero naming BILLINGD_URL; nothing hangs.
func TestMCPStdioLostServer(t *testing.T) {
	t.Parallel()
	t.Run("nothing listens", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		ln.Close()
		b := newBridge(t, closed, "tok")
		start := time.Now()
		// On 2025-11-25 initialize is the first request. (A 2026-07-28
		// client's first is server/discover, which gets this answer; its
		// fallback to initialize then finds the bridge gone.)
		if _, err := b.dial(protocol20251125, nil); err == nil || !strings.Contains(err.Error(), "BILLINGD_URL") {
			t.Fatalf("connect through a bridge to a closed port: %v", err)
		}
		wantOneLineExit(t, b.exited(t), "", b.logs.String(), "BILLINGD_URL")
		if time.Since(start) > 20*time.Second {
			t.Fatalf("took %s", time.Since(start))
		}
	})
	t.Run("server gone mid-session", func(t *testing.T) {
		h := newHarness(t)
		h.createOrg("gone", "Gone", "pro")
		target, _ := url.Parse(h.url)
		front := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
		defer front.Close()
		b := newBridge(t, front.URL, h.mcpUser("gone", "alice"))
		cs, err := b.dial(protocol20251125, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, b.logs.String())
		}
		wantSuccess(t, callTool(t, cs, "list_plans", nil), nil)

		front.CloseClientConnections()
		front.Close()
		start := time.Now()
		if _, err := callToolErr(cs, "get_subscription", nil); err == nil || !strings.Contains(err.Error(), "BILLINGD_URL") {
			t.Fatalf("a call after the server went away: %v", err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the error took %s", time.Since(start))
		}
		_ = cs.Close()
		wantOneLineExit(t, b.exited(t), "", b.logs.String(), "BILLINGD_URL")
	})
}

// runBridge runs billingd mcp stdio with env and input, within a bound.
func runBridge(t *testing.T, env []string, input string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, billingdBinary(t), "mcp", "stdio")
	cmd.Env = env
	cmd.Stdin = strings.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("billingd mcp stdio did not end: %s", errOut.String())
	}
	return out.String(), errOut.String(), err
}

// wantOneLineExit checks the command contract's failure: a non-zero exit and
// one line on stderr (after any log lines) that names what to fix.
func wantOneLineExit(t *testing.T, err error, stdout, stderr, names string) {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("billingd mcp stdio did not fail: %v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
	var last string
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.Contains(line, "level=") { // the bridge's own log lines
			if last != "" {
				t.Fatalf("stderr has more than one error line: %q", stderr)
			}
			last = line
		}
	}
	if !strings.HasPrefix(last, "billingd: ") || !strings.Contains(last, names) {
		t.Fatalf("stderr %q: want one line naming %s", stderr, names)
	}
}

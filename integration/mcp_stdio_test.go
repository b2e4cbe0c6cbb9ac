package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// stdioEnv is the environment of billingd mcp stdio against the harness's
// database, issuer and Stripe, with token as the caller.
func (h *harness) stdioEnv(token string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LOG_FORMAT=text"}
	for _, name := range []string{"DATABASE_URL", "STRIPE_SECRET_KEY", "STRIPE_API_BASE", "OAUTH_ISSUER", "PUBLIC_BASE_URL",
		"RATE_LIMIT_PROPOSALS", "RATE_LIMIT_FAILED_CONFIRMS"} {
		if v, ok := h.env[name]; ok {
			env = append(env, name+"="+v)
		}
	}
	if token != "" {
		env = append(env, "BILLINGD_ACCESS_TOKEN="+token)
	}
	return env
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

// TestMCPStdio: the Go SDK's client launches billingd mcp stdio as a local
// agent would and completes the handshake; the change is visible over REST
// and the audit log names the token's client.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("local", "Local Dev", "pro")
	tok := h.mcpToken("local", "alice", "claude-code", auth.ScopeRead, auth.ScopeWrite)

	cmd := exec.Command(billingdBinary(t), "mcp", "stdio")
	cmd.Env = h.stdioEnv(tok)
	var logs lockedBuffer
	cmd.Stderr = &logs
	client := sdk.NewClient(&sdk.Implementation{Name: "stdio-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() { _ = cs.Close() })

	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 6 { // contract §7 and confirm_plan_change (§7.1)
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
	if done.Subscription.Plan != "scale" || h.subscription(h.user("local", "alice")) != "scale" {
		t.Fatalf("second call: %+v", done)
	}
	for _, e := range h.auditEvents("local") {
		if e.Principal != "alice" || e.Client != "claude-code" || e.RequestID == "" {
			t.Fatalf("audit event %+v", e)
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("close: %v\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), p.ConfirmToken) || strings.Contains(logs.String(), tok) {
		t.Fatal("a token reached the logs")
	}
	if !strings.Contains(logs.String(), "tool call") {
		t.Fatalf("no tool-call logs on stderr: %s", logs.String())
	}
}

// TestMCPStdioScopes: over stdio there is no HTTP layer to answer 403, so a
// missing scope is an isError result.
func TestMCPStdioScopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("ro", "Read Only", "pro")
	cmd := exec.Command(billingdBinary(t), "mcp", "stdio")
	cmd.Env = h.stdioEnv(h.mcpToken("ro", "alice", "agent", auth.ScopeRead))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	wantSuccess(t, callTool(t, cs, "list_plans", nil), nil)
	wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), "insufficient_scope")
}

// TestMCPStdioRefusesToStart: without a valid BILLINGD_ACCESS_TOKEN the
// command exits non-zero with a one-line error and writes nothing to stdout.
func TestMCPStdioRefusesToStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	mint := func(c devissuer.Claims) string {
		tok, err := h.issuer.Mint(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	cases := map[string]string{
		"no token": "",
		"garbage":  "not-a-jwt",
		"expired": mint(devissuer.Claims{Subject: "alice", Org: "x", Scopes: []string{auth.ScopeRead},
			Audience: []string{h.url + "/mcp"}, TTL: -time.Minute}),
		"wrong audience": mint(devissuer.Claims{Subject: "alice", Org: "x", Scopes: []string{auth.ScopeRead},
			Audience: []string{"https://other.example/mcp"}}),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(billingdBinary(t), "mcp", "stdio")
			cmd.Env = h.stdioEnv(tok)
			cmd.Stdin = strings.NewReader(initializeRequest + "\n")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if _, exited := err.(*exec.ExitError); !exited {
				t.Fatalf("mcp stdio did not fail: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if stdout.Len() != 0 || len(lines) != 1 || !strings.Contains(lines[0], "BILLINGD_ACCESS_TOKEN") {
				t.Fatalf("stdout %q, stderr %q: want nothing on stdout and one line naming BILLINGD_ACCESS_TOKEN", stdout.String(), stderr.String())
			}
			if tok != "" && strings.Contains(stderr.String(), tok) {
				t.Fatal("the token reached stderr")
			}
		})
	}
}

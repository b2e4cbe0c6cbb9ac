package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// npmClientDir holds the Node script and its pinned @modelcontextprotocol/sdk
// (make test runs npm ci there).
const npmClientDir = "npmclient"

// TestMCPNpmClient runs the official npm SDK's client (protocol 2025-11-25)
// against the real server, over Streamable HTTP and over billingd mcp stdio
// (its StdioClientTransport starts the bridge with BILLINGD_URL and
// BILLINGD_ACCESS_TOKEN only): connect with a bearer token, list the tools,
// the two-call upgrade, a replay of the spent token, and a read.
func TestMCPNpmClient(t *testing.T) {
	t.Parallel()
	node := nodeWithSDK(t)
	h := newHarness(t)
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			org := "npm-" + transport
			h.createOrg(org, "Npm Works", "pro")
			env := []string{"BILLINGD_MCP_URL=" + h.url + "/mcp",
				"BILLINGD_ACCESS_TOKEN=" + h.mcpToken(org, "alice", "npm-agent", "billing:read", "billing:write"),
				"BILLINGD_PLAN=scale"}
			if transport == "stdio" {
				// The server's secrets in the client's environment must not
				// matter: the bridge neither gets nor needs them.
				env = append(env, "BILLINGD_MCP_COMMAND="+billingdBinary(t),
					"DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing", "STRIPE_SECRET_KEY=sk_live_not_a_key")
			}
			runNpmClient(t, node, h, org, env)
		})
	}
}

// runNpmClient runs client.mjs with env and checks what it saw.
func runNpmClient(t *testing.T, node string, h *harness, org string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = npmClientDir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}

	type result struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Text              []string        `json:"text"`
	}
	var out struct {
		ProtocolVersion string `json:"protocolVersion"`
		Server          struct{ Name string }
		Tools           []struct {
			Name        string
			Annotations struct{ ReadOnlyHint, DestructiveHint bool }
			Required    []string
		}
		First, ViewOnly, Second, Replay, Subscription result
		Seats, Cancel, Resume                         result
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	if out.ProtocolVersion != protocol20251125 || out.Server.Name != "billingd" || len(out.Tools) != len(billing.Offers())+4 {
		t.Fatalf("session: %s", stdout.String())
	}
	for _, tool := range out.Tools {
		if tool.Name == "upgrade_plan" && (!tool.Annotations.DestructiveHint || strings.Join(tool.Required, ",") != "to") {
			t.Fatalf("upgrade_plan as the npm client sees it: %+v", tool)
		}
	}

	var p proposal
	if err := json.Unmarshal(out.First.StructuredContent, &p); err != nil || out.First.IsError || !strings.HasPrefix(p.ConfirmToken, "pbc_") ||
		len(out.First.Text) == 0 || out.First.Text[0] != p.Summary || !strings.HasPrefix(p.Summary, "Upgrade Npm Works from Pro") {
		t.Fatalf("first call: %+v", out.First)
	}
	if !out.ViewOnly.IsError || !strings.Contains(string(out.ViewOnly.StructuredContent), `"code":"invalid_request"`) {
		t.Fatalf("confirm_plan_change from a client without MCP Apps: %+v", out.ViewOnly)
	}
	var done executed
	if err := json.Unmarshal(out.Second.StructuredContent, &done); err != nil || out.Second.IsError || !done.OK || done.Subscription.Plan != "scale" {
		t.Fatalf("second call: %+v", out.Second)
	}
	if out.Replay.IsError || !strings.Contains(string(out.Replay.StructuredContent), `"replayed":true`) {
		t.Fatalf("replay: %+v", out.Replay)
	}
	for name, r := range map[string]result{"change_seats": out.Seats, "cancel_subscription": out.Cancel, "resume_subscription": out.Resume} {
		if r.IsError || !strings.Contains(string(r.StructuredContent), `"ok":true`) {
			t.Fatalf("%s second call: %+v", name, r)
		}
	}
	if s := string(out.Subscription.StructuredContent); !strings.Contains(s, `"plan":"scale"`) || !strings.Contains(s, `"quantity":3`) ||
		!strings.Contains(s, `"cancel_at_period_end":false`) {
		t.Fatalf("subscription: %+v", out.Subscription)
	}
	// The replay executes nothing; then seats, a cancellation and its
	// resumption, each issued, validated and executed.
	wantEvents(t, h.auditEvents(org), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED",
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED", "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED",
		"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
}

// nodeWithSDK returns the node binary when it and the npm client's packages
// are installed. Without them the test skips, except on CI, where make test
// installs them and their absence is a failure.
func nodeWithSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, "node is not installed: %v", err)
	}
	pkg := filepath.Join(npmClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(pkg); err != nil {
		skipOrFail(t, "the npm MCP client is not installed (npm ci --prefix integration/npmclient): %v", err)
	}
	return node
}

// skipOrFail skips a test that lacks a component, or fails it on CI
// (CI=true), as internal/testenv does for PostgreSQL and stripe-mock.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and "+format, args...)
	}
	t.Skipf(format, args...)
}

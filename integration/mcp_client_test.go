package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// Helpers for the MCP tests: the Go SDK's client over Streamable HTTP, with a
// bearer token on every request.

// Protocol versions of the MCP clients billingd must serve (contract §7).
const (
	protocol20251125 = "2025-11-25" // the npm SDK's: sessions, server-to-client requests
	protocol20260728 = "2026-07-28" // the Go SDK's latest: stateless, multi-round-trip
)

// bearer adds an access token to every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpConnect opens an MCP session to baseURL/mcp as token, asking for
// protocol version (empty: the client's latest). The session closes when the
// test ends.
func mcpConnect(t *testing.T, baseURL, token, version string) *sdk.ClientSession {
	t.Helper()
	return mcpConnectWith(t, baseURL, token, version, nil, false)
}

// mcpConnectWith is mcpConnect with client options (capabilities, handlers);
// reconnect lets the transport retry, as real clients do.
func mcpConnectWith(t *testing.T, baseURL, token, version string, opts *sdk.ClientOptions, reconnect bool) *sdk.ClientSession {
	t.Helper()
	cs, err := mcpDialWith(baseURL, token, version, opts, reconnect)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", baseURL, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func mcpDial(baseURL, token, version string) (*sdk.ClientSession, error) {
	return mcpDialWith(baseURL, token, version, nil, false)
}

func mcpDialWith(baseURL, token, version string, opts *sdk.ClientOptions, reconnect bool) (*sdk.ClientSession, error) {
	return mcpDialVia(baseURL, bearer{token}, version, opts, reconnect)
}

// mcpDialVia is mcpDialWith with the HTTP transport that adds credentials.
func mcpDialVia(baseURL string, credentials http.RoundTripper, version string, opts *sdk.ClientOptions, reconnect bool) (*sdk.ClientSession, error) {
	client := sdk.NewClient(&sdk.Implementation{Name: "billingd-integration", Version: "1"}, opts)
	transport := &sdk.StreamableClientTransport{
		Endpoint:   baseURL + "/mcp",
		HTTPClient: &http.Client{Transport: credentials, Timeout: 30 * time.Second},
	}
	if !reconnect {
		transport.MaxRetries = -1 // a refused request is an answer here, not a reason to retry
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Connect(ctx, transport, &sdk.ClientSessionOptions{ProtocolVersion: version})
}

// callTool calls a tool and requires an answer (a result, possibly isError).
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := callToolErr(cs, name, args)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func callToolErr(cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, error) {
	if args == nil {
		args = map[string]any{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
}

// structured decodes a result's structuredContent into v and returns its raw
// JSON.
func structured(t *testing.T, res *sdk.CallToolResult, v any) []byte {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("structuredContent %s: %v", data, err)
		}
	}
	return data
}

// texts returns a result's text blocks.
func texts(res *sdk.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return out
}

// wantSuccess requires a successful result and decodes it into v.
func wantSuccess(t *testing.T, res *sdk.CallToolResult, v any) []byte {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool failed: %v", texts(res))
	}
	return structured(t, res, v)
}

// wantToolError requires an isError result whose structuredContent is
// exactly the contract's {"error":{"code","message"}} with code.
func wantToolError(t *testing.T, res *sdk.CallToolResult, code string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want isError %s, got success: %v", code, texts(res))
	}
	var body map[string]map[string]string
	data := structured(t, res, &body)
	if len(body) != 1 || len(body["error"]) != 2 || body["error"]["code"] != code || body["error"]["message"] == "" {
		t.Fatalf("structuredContent %s, want {\"error\":{\"code\":%q,\"message\":…}}", data, code)
	}
	if tx := texts(res); len(tx) == 0 || !strings.HasPrefix(tx[0], code+": ") {
		t.Fatalf("text content %q does not start with the code %s", tx, code)
	}
}

// keysOf lists the top-level keys of a JSON object.
func keysOf(t *testing.T, data []byte) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// mcpToken mints an access token for the MCP resource (aud PUBLIC_BASE_URL/mcp,
// as an MCP client asking for resource=…/mcp gets) with client as azp.
func (h *harness) mcpToken(org, principal, client string, scopes ...string) string {
	h.t.Helper()
	tok, err := h.issuer.Mint(devissuer.Claims{
		Subject: principal, Org: org, Client: client, Scopes: scopes, Audience: []string{h.url + "/mcp"},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// mcpUser is a principal with billing:read and billing:write for /mcp.
func (h *harness) mcpUser(org, principal string) string {
	return h.mcpToken(org, principal, "mcp-agent", auth.ScopeRead, auth.ScopeWrite)
}

// mcpPost sends one raw JSON-RPC message to /mcp, for what the SDK client
// hides: status codes and headers.
func (h *harness) mcpPost(host, token, body string) response {
	h.t.Helper()
	req, err := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

const initializeRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func toolCallRequest(tool string, args string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
}

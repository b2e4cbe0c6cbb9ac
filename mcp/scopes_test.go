package mcp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

func TestToolCalls(t *testing.T) {
	call := func(id int, params string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, params)
	}
	cases := []struct {
		name, body string
		want       []string
	}{
		{"one call", call(1, `{"name":"upgrade_plan","arguments":{"to":"scale"}}`), []string{"upgrade_plan"}},
		{"batch", `[` + call(1, `{"name":"list_plans"}`) + `,` + call(2, `{"name":"cancel_confirmation"}`) + `]`,
			[]string{"list_plans", "cancel_confirmation"}},
		{"other method", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil},
		{"not JSON", `{"jsonrpc":`, nil},
		{"re-cased key is not the name", call(1, `{"NAME":"upgrade_plan"}`), []string{""}},
		{"last duplicate wins", call(1, `{"name":"list_plans","name":"upgrade_plan"}`), []string{"upgrade_plan"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, tc := range toolCalls([]byte(c.body)) {
				got = append(got, tc.tool)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("toolCalls = %q, want %q", got, c.want)
			}
		})
	}
}

func TestScopesToRequest(t *testing.T) {
	cases := []struct {
		granted []string
		missing string
		want    string
	}{
		{nil, "billing:write", "billing:write"},
		{[]string{"billing:read"}, "billing:write", "billing:read billing:write"},
		{[]string{"billing:admin", "openid"}, "billing:read", "billing:read billing:admin"},
	}
	for _, c := range cases {
		info := &sdkauth.TokenInfo{Scopes: c.granted}
		if got := strings.Join(scopesToRequest(info, c.missing), " "); got != c.want {
			t.Errorf("scopesToRequest(%v, %s) = %q, want %q", c.granted, c.missing, got, c.want)
		}
	}
}

func TestPublicHost(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:8080":          "",
		"http://localhost:8080":          "",
		"http://[::1]:8080":              "",
		"https://Billing.Example.com":    "billing.example.com",
		"https://billing.example.com:44": "billing.example.com",
		"http://10.0.0.5:8080":           "10.0.0.5",
	}
	for in, want := range cases {
		if got := publicHost(in); got != want {
			t.Errorf("publicHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHostGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	guard := hostGuard(ok, "billing.example.com")
	cases := []struct {
		local, host string
		want        int
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", http.StatusNoContent},
		{"127.0.0.1:8080", "localhost:8080", http.StatusNoContent},
		{"127.0.0.1:8080", "billing.example.com", http.StatusNoContent},
		{"127.0.0.1:8080", "BILLING.example.com:443", http.StatusNoContent},
		{"127.0.0.1:8080", "attacker.example", http.StatusForbidden},
		{"[::1]:8080", "attacker.example:8080", http.StatusForbidden},
		{"10.0.0.5:8080", "anything.example", http.StatusNoContent}, // not a loopback listener
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.Host = c.host
		addr, err := net.ResolveTCPAddr("tcp", c.local)
		if err != nil {
			t.Fatal(err)
		}
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(addr)))
		w := httptest.NewRecorder()
		guard.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("local %s, Host %s: %d, want %d", c.local, c.host, w.Code, c.want)
		}
	}
}

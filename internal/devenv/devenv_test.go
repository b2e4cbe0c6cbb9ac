package devenv

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

func TestIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.1.2.3:8080", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{":8080", false}, // every interface
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"192.168.1.10:8080", false},
		{"example.com:8080", false},
		{"127.0.0.1", false}, // no port: not an address at all
	} {
		if got := isLoopback(tc.addr); got != tc.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	_, err := Listen("0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "LISTEN_ADDR") {
		t.Fatalf("Listen(0.0.0.0:0) = %v, want an error naming LISTEN_ADDR", err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestNewestFirst(t *testing.T) {
	got := newestFirst([]string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/15/bin",
		"/opt/homebrew/opt/postgresql@16/bin", "/usr/lib/postgresql/13/bin"})
	want := []string{"/opt/homebrew/opt/postgresql@16/bin", "/usr/lib/postgresql/15/bin",
		"/usr/lib/postgresql/13/bin", "/usr/lib/postgresql/9.6/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("newestFirst = %v, want %v", got, want)
	}
}

// fakeInfo is just enough of os.FileInfo for canEnter.
type fakeInfo struct {
	os.FileInfo
	mode     fs.FileMode
	uid, gid uint32
}

func (f fakeInfo) Mode() fs.FileMode { return f.mode }
func (f fakeInfo) Sys() any          { return &syscall.Stat_t{Uid: f.uid, Gid: f.gid} }

func TestCanEnter(t *testing.T) {
	pg := &syscall.Credential{Uid: 101, Gid: 104}
	for _, tc := range []struct {
		name string
		info fakeInfo
		want bool
	}{
		{"root's home", fakeInfo{mode: fs.ModeDir | 0o700}, false},
		{"world-searchable", fakeInfo{mode: fs.ModeDir | 0o711}, true},
		{"owned by postgres", fakeInfo{mode: fs.ModeDir | 0o700, uid: 101}, true},
		{"group postgres", fakeInfo{mode: fs.ModeDir | 0o750, gid: 104}, true},
		{"group postgres without x", fakeInfo{mode: fs.ModeDir | 0o740, gid: 104}, false},
	} {
		if got := canEnter(tc.info, pg); got != tc.want {
			t.Errorf("%s: canEnter = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPrintWelcome(t *testing.T) {
	iss, err := devissuer.New("http://127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(name string) string {
		return map[string]string{"LISTEN_ADDR": "127.0.0.1:18080"}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DatabaseURL, cfg.StripeSecretKey, cfg.StripeAPIBase = "postgres://u:p@127.0.0.1:5/billingd", stripeMockKey, "http://127.0.0.1:12111"
	cfg.OAuthIssuer = iss.IssuerURL()
	e := &Env{Config: cfg, Issuer: iss, Database: "db", Stripe: "stripe", dir: ".dev", stateDir: "/var/lib/billingd-dev/x"}
	acct := billing.Account{Org: billing.Org{ID: DemoOrg, Name: DemoOrgName}, Subscription: billing.Subscription{Plan: DemoPlan}}

	var out strings.Builder
	if err := e.PrintWelcome(&out, acct); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"Dashboard  http://127.0.0.1:18080/",
		"curl -s -X POST http://127.0.0.1:18080/api/billing/upgrade -H 'Authorization: Bearer ey",
		"within 60s",
		"'http://127.0.0.1:18080/api/billing/audit?limit=10'",
		"Data stays in /var/lib/billingd-dev/x;",
		// Which client is which (contract §4).
		"agent: client demo-agent acting for demo-user",
		"an agent, as every client not in PERSON_CLIENTS: its changes are agent_relayed",
		"admin: demo-admin through client demo-dashboard",
		"a person: billingd dev lists demo-dashboard in PERSON_CLIENTS",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("welcome text lacks %q:\n%s", want, text)
		}
	}
	t.Run("MCP configurations are valid JSON", func(t *testing.T) {
		var httpCfg struct {
			MCPServers map[string]mcpHTTPServer `json:"mcpServers"`
		}
		mustJSON(t, e.mcpOverHTTP, &httpCfg)
		if s := httpCfg.MCPServers["billingd"]; s.URL != "http://127.0.0.1:18080/mcp" || s.Headers["Authorization"] != "Bearer tok" {
			t.Errorf("HTTP entry: %+v", s)
		}
		var stdioCfg struct {
			MCPServers map[string]mcpStdioServer `json:"mcpServers"`
		}
		mustJSON(t, e.mcpOverStdio, &stdioCfg)
		s := stdioCfg.MCPServers["billingd"]
		want := map[string]string{"BILLINGD_URL": "http://127.0.0.1:18080", "BILLINGD_ACCESS_TOKEN": "tok"}
		if strings.Join(s.Args, " ") != "mcp stdio" || !maps.Equal(s.Env, want) {
			t.Errorf("stdio entry: %+v, want only the environment %v", s, want)
		}
	})
	t.Run("no database URL or Stripe key", func(t *testing.T) {
		// Whatever reads an agent's configuration, pasted from here, may
		// use it: the welcome hands out tokens, never the server's secrets.
		for _, secret := range []string{cfg.DatabaseURL, cfg.StripeSecretKey, "postgres://", "sk_test_", "sk_live_"} {
			if strings.Contains(text, secret) {
				t.Errorf("the welcome text contains %q:\n%s", secret, text)
			}
		}
	})
	t.Run("the agent token", func(t *testing.T) {
		tok, err := e.mint(AgentSubject, AgentClient, DemoOrg, agentScopes)
		if err != nil {
			t.Fatal(err)
		}
		claims := jwt.MapClaims{}
		if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"sub": AgentSubject, "azp": AgentClient, "org_id": DemoOrg,
			"scope": "billing:read billing:write", "iss": iss.IssuerURL()}
		for k, v := range want {
			if claims[k] != v {
				t.Errorf("%s = %v, want %v", k, claims[k], v)
			}
		}
		if aud, _ := claims.GetAudience(); len(aud) != 1 || aud[0] != cfg.PublicBaseURL {
			t.Errorf("aud = %v, want [%s]", aud, cfg.PublicBaseURL)
		}
		if exp, _ := claims.GetExpirationTime(); time.Until(exp.Time) < TokenTTL-time.Minute {
			t.Errorf("expires in %v, want about %v", time.Until(exp.Time), TokenTTL)
		}
	})
}

// TestDevNamesPersonClients: billingd dev lists the admin token's client in
// PERSON_CLIENTS, once, beside any the environment names, and never the
// agent token's.
func TestDevNamesPersonClients(t *testing.T) {
	e := &Env{Config: config.Config{PersonClients: []string{"acme-dashboard"}}}
	e.namePersonClients()
	e.namePersonClients()
	if got := e.Config.PersonClients; !slices.Equal(got, []string{"acme-dashboard", DashboardClient}) || slices.Contains(got, AgentClient) {
		t.Fatalf("PERSON_CLIENTS %q", got)
	}
}

func mustJSON(t *testing.T, render func(string) (string, error), v any) {
	t.Helper()
	out, err := render("tok")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
}

func TestParseStripeStandIn(t *testing.T) {
	for in, want := range map[string]StripeStandIn{"": StripeFake, "fake": StripeFake, "mock": StripeMock} {
		if got, err := ParseStripeStandIn(in); err != nil || got != want {
			t.Errorf("ParseStripeStandIn(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseStripeStandIn("stripe"); err == nil {
		t.Error("ParseStripeStandIn(stripe) accepted an unknown stand-in")
	}
}

// TestRenew: a saved subscription whose period ended while billingd dev was
// not running is in a current period again when loaded.
func TestRenew(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const period = 30 * 24 * time.Hour
	for _, tc := range []struct {
		now       time.Time
		wantStart time.Time
	}{
		{start.Add(time.Hour), start},
		{start.Add(period), start},
		{start.Add(period + time.Second), start.Add(period)},
		{start.Add(95 * 24 * time.Hour), start.Add(3 * period)},
	} {
		sub := stripepaytest.Subscription{CurrentPeriodStart: start, CurrentPeriodEnd: start.Add(period)}
		renew(&sub, tc.now)
		if !sub.CurrentPeriodStart.Equal(tc.wantStart) || sub.CurrentPeriodEnd.Sub(sub.CurrentPeriodStart) != period {
			t.Errorf("at %v: period %v – %v, want from %v", tc.now, sub.CurrentPeriodStart, sub.CurrentPeriodEnd, tc.wantStart)
		}
	}
}

func TestHomeName(t *testing.T) {
	a, b := homeName("/root/src/billingd/.dev"), homeName("/tmp/tmp.x1/billingd/.dev")
	if !strings.HasPrefix(a, "billingd-") || !strings.HasPrefix(b, "billingd-") || a == b {
		t.Errorf("homeName: %q and %q, want billingd-<hash>, different", a, b)
	}
	if got := homeName("/tmp/my checkout/.dev"); !strings.HasPrefix(got, "my_checkout-") {
		t.Errorf("homeName with a space = %q", got)
	}
	if got := homeName("/tmp/.hidden/.dev"); strings.HasPrefix(got, ".") {
		t.Errorf("homeName of a dot directory = %q, a hidden name", got)
	}
}

// TestEnsurePrivateDir: as root, a directory someone else owns or a
// symbolic link where the cluster's home should be is refused.
func TestEnsurePrivateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it hands directories to other users")
	}
	parent := t.TempDir()
	other := &syscall.Credential{Uid: 65534, Gid: 65534}
	root := &syscall.Credential{Uid: 0}
	own := parent + "/own"
	if err := ensurePrivateDir(own, 0o700, other); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := ensurePrivateDir(own, 0o700, other); err != nil {
		t.Fatalf("again: %v", err)
	}
	if err := ensurePrivateDir(own, 0o700, root); err == nil {
		t.Error("accepted a directory of another owner")
	}
	link := parent + "/link"
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	if err := ensurePrivateDir(link, 0o700, other); err == nil {
		t.Error("accepted a symbolic link")
	}
	open := parent + "/open"
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := ensurePrivateDir(open, 0o755, root); err == nil {
		t.Error("accepted a directory anyone can write to")
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devissuer"
)

// The replica deployment of docs/deployment-replicas.md, for real: Debian's
// nginx with the shipped deploy/nginx/billingd.conf in front of two billingd
// replicas on one database.

// TestMCPBehindNginxReplicas: a 2025-11-25 client completes a handshake with
// form elicitation through the proxy, every request of its session reaching
// the replica that holds it; a replica's restart (and a replica that stays
// down) makes the client start a new session and go on, with the pending
// confirmation intact; 2026-07-28 requests go to any replica; sign-in
// starts are counted per client as nginx names it (TRUSTED_PROXIES).
func TestMCPBehindNginxReplicas(t *testing.T) {
	nginx := nginxBinary(t)
	h := newHarness(t)
	acct := h.createOrg("relay", "Relay", "pro")

	proxyAddr := freeAddr(t)
	proxyURL := "http://" + proxyAddr
	replicas := map[string]*replicaProcess{}
	for _, name := range []string{"billingd-1", "billingd-2"} {
		r := &replicaProcess{t: t, name: name, addr: freeAddr(t), env: map[string]string{}}
		for k, v := range h.env {
			r.env[k] = v
		}
		r.env["LISTEN_ADDR"], r.env["PUBLIC_BASE_URL"], r.env["MCP_REPLICA_ID"] = r.addr, proxyURL, name
		r.env["MCP_REQUEST_STATE_KEY"] = "the-same-secret-on-every-replica-of-billingd"
		// nginx reaches the replicas from 127.0.0.1: its X-Forwarded-For
		// names the client only because it is listed.
		r.env["TRUSTED_PROXIES"], r.env["RATE_LIMIT_SIGN_INS"] = "127.0.0.1/32", "3"
		r.start()
		t.Cleanup(r.stop)
		replicas[name] = r
	}
	startNginx(t, nginx, proxyAddr, map[string]string{
		"billingd-1:8080": replicas["billingd-1"].addr, "billingd-2:8080": replicas["billingd-2"].addr})

	token := mintFor(t, h.issuer, proxyURL, "relay", "alice")

	// 1. A handshake with form elicitation through the proxy: the
	// elicitation goes out on the tool call's event stream from the replica
	// that holds the session, and the answer, a new POST, comes back to it.
	o := &host{h: h, token: h.user("relay", "alice"), answer: answerWith("accept", map[string]any{"confirm": true})}
	elicited := elicitConnect(t, proxyURL, token, protocol20251125, formOnly, o, false)
	home := replicaOf(t, replicas, elicited.ID())
	var got changeOutcome
	wantSuccess(t, callTool(t, elicited, "upgrade_plan", map[string]any{"to": "scale"}), &got)
	if !got.OK || got.elicited() != "form:accept" || got.Subscription.Plan != "scale" {
		t.Fatalf("through nginx: %+v", got)
	}
	h.wantStripeChanges(acct, 1)
	for name, r := range replicas {
		if n := r.sessionRequests(elicited.ID()); (name == home.name) != (n > 0) {
			t.Fatalf("replica %s saw %d requests of session %s, which lives on %s", name, n, elicited.ID(), home.name)
		}
	}

	// 2. A pending confirmation, then its replica restarts: the session is
	// gone, the client starts a new one and the second call executes.
	cs := reconnectingClient(t, proxyURL, token)
	var p proposal
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro"}), &p)
	restarted := replicaOf(t, replicas, cs.ID())
	restarted.stop()
	restarted.start()
	if _, err := callToolErr(cs, "get_subscription", nil); !errors.Is(err, sdk.ErrSessionMissing) {
		t.Fatalf("after %s restarted, a call in its old session: %v, want the session to be missing", restarted.name, err)
	}
	again := reconnectingClient(t, proxyURL, token)
	var done executed
	wantSuccess(t, callTool(t, again, "downgrade_plan", map[string]any{"to": "pro", "confirm_token": p.ConfirmToken}), &done)
	if !done.OK || done.Subscription.Plan != "pro" {
		t.Fatalf("second call after the restart: %+v", done)
	}
	h.wantStripeChanges(acct, 2)

	// 3. The replica of a session goes away for good: the proxy answers 404,
	// and the client's new session lands on the replica that is left.
	gone := replicaOf(t, replicas, again.ID())
	gone.stop()
	if _, err := callToolErr(again, "get_subscription", nil); !errors.Is(err, sdk.ErrSessionMissing) {
		t.Fatalf("with %s down, a call in its session: %v, want the session to be missing", gone.name, err)
	}
	last := mcpConnect(t, proxyURL, token, protocol20251125)
	if plan := mcpPlan(t, last); plan != "pro" || replicaOf(t, replicas, last.ID()) == gone {
		t.Fatalf("new session %s: plan %s", last.ID(), plan)
	}
	gone.start()

	// 4. 2026-07-28 has no sessions: its requests go to any replica.
	modern := mcpConnect(t, proxyURL, token, protocol20260728)
	for range 6 {
		wantSuccess(t, callTool(t, modern, "list_plans", nil), nil)
	}
	for name, r := range replicas {
		if r.statelessRequests() == 0 {
			t.Fatalf("replica %s saw no 2026-07-28 request: they should spread over every replica", name)
		}
	}

	// 5. Sign-in starts are counted per client, as nginx names it in
	// X-Forwarded-For (the client's own X-Forwarded-For is only what nginx
	// appends to), on both replicas together.
	for i := range 4 {
		want := http.StatusSeeOther
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if got := startSignInFrom(t, proxyURL, "127.0.0.2", fmt.Sprintf("198.51.100.%d", i+1)); got != want {
			t.Fatalf("sign-in start %d from 127.0.0.2 through nginx: %d, want %d", i+1, got, want)
		}
	}
	if got := startSignInFrom(t, proxyURL, "127.0.0.3", ""); got != http.StatusSeeOther {
		t.Fatalf("sign-in start from another client through nginx: %d", got)
	}
}

// startSignInFrom starts a sign-in at baseURL from the local address
// source (a loopback address other than nginx's own), with xff as the
// client's own X-Forwarded-For when set, and returns the answer's status.
func startSignInFrom(t *testing.T, baseURL, source, xff string) int {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest("GET", baseURL+"/auth/login", nil)
	if err != nil {
		t.Fatal(err)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// reconnectingClient is a 2025-11-25 client that, like a real one, reopens
// its event stream when it breaks (mcpConnect's clients never retry), and so
// learns that its session is gone.
func reconnectingClient(t *testing.T, baseURL, token string) *sdk.ClientSession {
	t.Helper()
	return mcpConnectWith(t, baseURL, token, protocol20251125, nil, true)
}

// nginxBinary is Debian's nginx, or a skip (a failure under CI=true; .ci/run
// installs it).
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, candidate := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(candidate); err == nil {
			return path
		}
	}
	skipOrFail(t, "nginx is not installed (apt-get install nginx)")
	return ""
}

// startNginx runs nginx in the foreground on addr with the shipped
// configuration, its replica addresses replaced. Everything it writes (pid,
// logs, temporary files) stays in a private directory, and it runs as one
// process (master_process off), so it needs neither root nor Debian's
// directories and works the same as root.
func startNginx(t *testing.T, nginx, addr string, upstreams map[string]string) {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("..", "deploy", "nginx", "billingd.conf"))
	if err != nil {
		t.Fatal(err)
	}
	site := strings.Replace(string(shipped), "listen 80;", "listen "+addr+";", 1)
	for from, to := range upstreams {
		if !strings.Contains(site, from) {
			t.Fatalf("deploy/nginx/billingd.conf does not name %s", from)
		}
		site = strings.ReplaceAll(site, from, to)
	}
	dir := t.TempDir()
	main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/billingd.conf;
}
`, dir)
	for name, body := range map[string]string{"billingd.conf": site, "nginx.conf": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx error log:\n%s", logs)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s\n%s", err, out.String(), logs)
		default:
		}
		// nginx writes its pid file once it has bound its addresses, so
		// what answers on addr is nginx and not a process that took the
		// address first (nginx then retries the bind, and gives up).
		if _, err := os.Stat(filepath.Join(dir, "nginx.pid")); err == nil {
			if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				_ = c.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mintFor is an MCP access token for the proxy's public URL.
func mintFor(t *testing.T, issuer *devissuer.Issuer, publicURL, org, principal string) string {
	t.Helper()
	tok, err := issuer.Mint(devissuer.Claims{Subject: principal, Org: org, Client: "mcp-agent",
		Scopes: []string{auth.ScopeRead, auth.ScopeWrite}, Audience: []string{publicURL + "/mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// replicaOf is the replica a session id names.
func replicaOf(t *testing.T, replicas map[string]*replicaProcess, sessionID string) *replicaProcess {
	t.Helper()
	name, _, ok := strings.Cut(sessionID, ".")
	if r := replicas[name]; ok && r != nil {
		return r
	}
	t.Fatalf("session id %q names no replica", sessionID)
	return nil
}

// replicaProcess is one billingd serve that a test can stop and start again
// on the same address, counting the MCP requests it answers.
type replicaProcess struct {
	t          *testing.T
	name, addr string
	env        map[string]string

	mu        sync.Mutex
	srv       *http.Server
	app       *app.App
	sessions  map[string]int // Mcp-Session-Id → requests
	stateless int            // requests of protocol 2026-07-28
}

func (r *replicaProcess) start() {
	r.t.Helper()
	cfg, err := config.Load(func(k string) string { return r.env[k] })
	if err != nil {
		r.t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{LogOutput: testLogWriter{r.t}})
	if err != nil {
		r.t.Fatal(err)
	}
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", r.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		a.Close()
		r.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.count(req)
		a.Handler.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(ln) }()
	r.mu.Lock()
	r.srv, r.app = srv, a
	r.mu.Unlock()
}

// stop ends the process's server and everything it held in memory: its MCP
// sessions with it.
func (r *replicaProcess) stop() {
	r.mu.Lock()
	srv, a := r.srv, r.app
	r.srv, r.app = nil, nil
	r.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	a.Close()
}

func (r *replicaProcess) count(req *http.Request) {
	if req.URL.Path != "/mcp" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions == nil {
		r.sessions = map[string]int{}
	}
	if id := req.Header.Get("Mcp-Session-Id"); id != "" {
		r.sessions[id]++
	}
	if req.Header.Get("Mcp-Protocol-Version") == protocol20260728 {
		r.stateless++
	}
}

func (r *replicaProcess) sessionRequests(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[id]
}

func (r *replicaProcess) statelessRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateless
}

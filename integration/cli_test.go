package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
	"github.com/billingd/billingd/migrations"
)

var binary struct {
	once sync.Once
	path string
	err  error
}

// billingdBinary builds cmd/billingd once per test run.
func billingdBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "billingd-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "billingd")
		out, err := exec.Command("go", "build", "-o", binary.path, "../cmd/billingd").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// cli runs billingd commands with a fixed environment.
type cli struct {
	t   *testing.T
	bin string
	env []string
}

func (c cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), exit.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

func (c cli) mustRun(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("billingd %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// TestCommandLine follows docs/operations.md, "Running it by hand": migrate,
// create an org, serve, run the handshake over HTTP, stop with SIGTERM.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	db := testenv.NewDatabase(t)
	issuer := startIssuer(t)
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	base := "http://" + addr
	c := cli{t: t, bin: billingdBinary(t), env: []string{
		"METRICS_ADDR=" + metricsAddr,
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + db.URL, "STRIPE_SECRET_KEY=sk_test_cli", "STRIPE_API_BASE=" + fakeStripeURL(t),
		"OAUTH_ISSUER=" + issuer.IssuerURL(), "LISTEN_ADDR=" + addr, "LOG_FORMAT=text",
	}}

	t.Run("usage", func(t *testing.T) {
		if out, _, code := c.run("--help"); code != 0 || !strings.Contains(out, "serve") {
			t.Fatalf("--help: exit %d: %s", code, out)
		}
		if _, errOut, code := c.run("teleport"); code != 2 || !strings.Contains(errOut, "unknown command") {
			t.Fatalf("unknown command: exit %d: %s", code, errOut)
		}
		if _, _, code := c.run("serve", "--help"); code != 0 {
			t.Fatalf("serve --help: exit %d", code)
		}
	})
	t.Run("migrate", func(t *testing.T) {
		latest, err := postgres.LatestVersion()
		if err != nil {
			t.Fatal(err)
		}
		// down N counts migrations, not version numbers (which may have
		// gaps).
		ups, err := fs.Glob(migrations.FS, "*.up.sql")
		if err != nil {
			t.Fatal(err)
		}
		c.mustRun("migrate", "down", fmt.Sprint(len(ups)))
		if out := c.mustRun("migrate", "version"); !strings.Contains(out, `"version": 0`) {
			t.Fatalf("version after down: %s", out)
		}
		c.mustRun("migrate", "up")
		if out := c.mustRun("migrate", "version"); !strings.Contains(out, fmt.Sprintf(`"version": %d`, latest)) || !strings.Contains(out, `"dirty": false`) {
			t.Fatalf("version after up: %s", out)
		}
	})
	t.Run("plans list", func(t *testing.T) {
		var body struct{ Plans []struct{ ID string } }
		if err := json.Unmarshal([]byte(c.mustRun("plans", "list")), &body); err != nil || len(body.Plans) != 3 || body.Plans[2].ID != "scale" {
			t.Fatalf("plans list: %v %+v", err, body)
		}
	})
	t.Run("org create", func(t *testing.T) {
		out := c.mustRun("org", "create", "--id", "vector", "--name", "Vector Build", "--plan", "pro", "--email", "ops@vector.example")
		if !strings.Contains(out, `"id": "vector"`) || !strings.Contains(out, `"stripe_customer_id": "cus_`) {
			t.Fatalf("org create: %s", out)
		}
		if _, errOut, code := c.run("org", "create", "--id", "vector", "--name", "Again", "--plan", "pro"); code == 0 || !strings.Contains(errOut, "already exists") {
			t.Fatalf("duplicate org: exit %d: %s", code, errOut)
		}
		if _, errOut, code := c.run("org", "create", "--id", "x", "--name", "X", "--plan", "gold"); code == 0 || !strings.Contains(errOut, "no such plan") {
			t.Fatalf("unknown plan: exit %d: %s", code, errOut)
		}
	})
	t.Run("invalid configuration names the variable", func(t *testing.T) {
		for _, setting := range []string{"CONFIRM_TTL=16m", "TRUSTED_PROXIES=10.0.0.0/8,nginx"} {
			bad := c
			bad.env = append(append([]string(nil), c.env...), setting)
			name, _, _ := strings.Cut(setting, "=")
			if _, errOut, code := bad.run("serve"); code == 0 || !strings.Contains(errOut, name) {
				t.Fatalf("serve with %s: exit %d: %s", setting, code, errOut)
			}
		}
	})
	t.Run("serve and handshake", func(t *testing.T) {
		cmd := exec.Command(c.bin, "serve")
		cmd.Env = c.env
		var logs lockedBuffer // written by the process while the test reads it
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		waitReady(t, base+"/readyz")

		tok, err := issuer.Mint(devissuer.Claims{Subject: "alice", Org: "vector", Scopes: []string{"billing:read", "billing:write"}, Audience: []string{base}})
		if err != nil {
			t.Fatal(err)
		}
		status, body := post(t, base+"/api/billing/upgrade", tok, `{"to":"scale"}`)
		var p proposal
		if status != 202 || json.Unmarshal(body, &p) != nil || p.ConfirmToken == "" {
			t.Fatalf("first call: %d %s", status, body)
		}
		status, body = post(t, base+"/api/billing/upgrade", tok, fmt.Sprintf(`{"to":"scale","confirm_token":%q}`, p.ConfirmToken))
		if status != 200 || !strings.Contains(string(body), `"plan":"scale"`) {
			t.Fatalf("second call: %d %s", status, body)
		}
		if strings.Contains(logs.String(), p.ConfirmToken) || strings.Contains(logs.String(), tok) {
			t.Fatal("a token reached the logs")
		}
		// Metrics on METRICS_ADDR, not on the API's listener.
		if status, body := get(t, "http://"+metricsAddr+"/metrics"); status != 200 || !strings.Contains(body, `route="/api/billing/upgrade"`) {
			t.Fatalf("metrics listener: %d", status)
		}
		if status, _ := get(t, base+"/metrics"); status != 404 {
			t.Fatalf("/metrics on the API listener: %d", status)
		}

		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop after SIGTERM")
		}
	})
}

// freeAddr is a loopback address nothing listens on, for a subprocess
// (billingd, nginx) to take, and never one it returned before in this test
// process. The kernel may hand a port it has just freed to the next
// listener: two calls could return the same address, and the second
// process to bind it would find it taken. That happened on CI: an nginx
// failed to bind, a billingd replica of the same test answered on the
// proxy's address, and the test saw that replica's sessions where it
// expected the proxy's.
func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln := listen(t)
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
}

// handedOut is every address freeAddr has returned.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

func waitReady(t *testing.T, url string) {
	t.Helper()
	if err := untilReady(url); err != nil {
		t.Fatal(err)
	}
}

// readyClient asks for readiness: a process that accepts and never answers
// (a port someone else listens on) must not hold the wait past its end.
var readyClient = &http.Client{Timeout: 2 * time.Second}

// untilReady waits for url to answer 200, for 30 s at most.
func untilReady(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := readyClient.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within 30s", url)
}

func post(t *testing.T, url, token, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// fakeStripeURL is the URL of a Stripe fake for a billingd process: the
// whole handshake needs one that keeps state (billingd reads the
// subscription back before a change).
func fakeStripeURL(t *testing.T) string {
	_, url := startFakeStripe(t)
	return url
}

//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/devenv"
	"github.com/billingd/billingd/internal/testenv"
)

// TestDev runs billingd dev as make run does, in an empty working directory
// (mode 700, as mktemp -d makes it) and with no configuration: it starts its
// own PostgreSQL and serves the Stripe fake, the curl command it prints
// works and shows today's dates and a prorated amount, and Ctrl-C (SIGINT)
// stops every process it started. Started again in the same directory, it
// keeps the data, and even SIGKILL leaves nothing behind. With --stripe=mock
// it runs stripe-mock instead. (Linux only: it finds processes in /proc,
// and only Linux has the parent-death signal SIGKILL relies on.)
func TestDev(t *testing.T) {
	// Not parallel: runs a whole PostgreSQL cluster of its own (initdb) and times its start.
	if _, err := devenv.PostgresBinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("%v: install PostgreSQL to test billingd dev", err)
	}
	stripeMock := testenv.StripeMockBinary(t)
	bin := billingdBinary(t)

	t.Run("refuses a non-loopback address", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(bin, "dev")
		cmd.Dir, cmd.Env = dir, devEnv(stripeMock, "0.0.0.0:0")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "LISTEN_ADDR 0.0.0.0:0 is not a loopback address") {
			t.Fatalf("billingd dev on 0.0.0.0: %v: %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, ".dev")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("it started something before refusing: .dev: %v", err)
		}
	})

	dir := t.TempDir()
	removeDataDir(t, dir)
	addr := freeAddr(t)
	base := "http://" + addr
	env := devEnv(stripeMock, addr)

	t.Run("first run, stopped with SIGINT", func(t *testing.T) {
		dev := startDev(t, bin, dir, env)
		out := dev.stdout.String()
		if !strings.Contains(out, `Demo org   demo "Demo Org", on pro`) {
			t.Errorf("demo org not seeded on pro:\n%s", out)
		}
		if !strings.Contains(out, "Stripe     the Stripe fake (internal/stripepay/stripepaytest) at http://127.0.0.1:") {
			t.Errorf("the welcome text does not name the Stripe fake:\n%s", out)
		}
		line := printedLine(t, out, "curl -s -X POST "+base+"/api/billing/upgrade")
		p := runPrintedCurl(t, line)
		if !p.ConfirmRequired || !strings.HasPrefix(p.ConfirmToken, "pbc_") || !strings.Contains(p.Summary, "Demo Org") {
			t.Fatalf("first call with the printed command: %+v", p)
		}
		wantRealNumbers(t, p)
		// The second call, as the printed hint says: the same command with
		// the confirm_token added.
		status, body := post(t, base+"/api/billing/upgrade", bearerToken(t, line), fmt.Sprintf(`{"to":"scale","confirm_token":%q}`, p.ConfirmToken))
		if status != 200 || !strings.Contains(string(body), `"plan":"scale"`) {
			t.Fatalf("second call: %d %s", status, body)
		}
		// demo-agent is an agent (it is not in PERSON_CLIENTS): its change
		// is on record as relayed, with no person shown to be present.
		wantDevConsent(t, out, base, billing.Consent{Method: billing.ConsentAgentRelayed, HumanPresent: billing.HumanNone})
		// On one machine the webhook receiver is local too: billingd dev
		// allows private networks (WEBHOOK_ALLOW_PRIVATE_NETWORKS).
		admin := bearerToken(t, printedLine(t, out, "curl -s '"+base+"/api/billing/audit?limit=10'"))
		status, body = post(t, base+"/api/billing/webhook-endpoints", admin,
			`{"url":"http://127.0.0.1:9/hook","events":["approval.requested"]}`)
		if status != 201 || !strings.Contains(string(body), `"secret":"whsec_`) {
			t.Fatalf("a local webhook endpoint in billingd dev: %d %s", status, body)
		}
		if out := dev.stdout.String(); !strings.Contains(out, `"url": "`+base+`/mcp"`) || !strings.Contains(out, `"BILLINGD_ACCESS_TOKEN": "ey`) {
			t.Errorf("MCP client configurations missing:\n%s", out)
		}
		// Issue 28: what billingd dev prints is pasted into agents'
		// configurations; it holds tokens, never the server's secrets.
		for _, secret := range []string{"postgres://", "postgresql://", "sk_test_", "sk_live_", "whsec_"} {
			if strings.Contains(dev.stdout.String()+dev.stderr.String(), secret) {
				t.Errorf("billingd dev printed %q:\nstdout:\n%s\nstderr:\n%s", secret, dev.stdout.String(), dev.stderr.String())
			}
		}
		t.Run("the printed stdio configuration works as printed", func(t *testing.T) {
			runPrintedStdio(t, dev.stdout.String())
		})
		dev.signal(t, syscall.SIGINT)
		if err := dev.wait(t); err != nil {
			t.Fatalf("billingd dev after SIGINT: %v\nstderr:\n%s", err, dev.stderr.String())
		}
		dev.noneLeft(t, dir)
	})
	t.Run("second run keeps the data; SIGKILL leaves no process", func(t *testing.T) {
		dev := startDev(t, bin, dir, env)
		if !strings.Contains(dev.stdout.String(), `Demo org   demo "Demo Org", on scale`) {
			t.Errorf("the demo org lost its upgrade:\n%s", dev.stdout.String())
		}
		// The fake kept the subscription too: the way back down is priced.
		line := printedLine(t, dev.stdout.String(), "curl -s -X POST "+base+"/api/billing/upgrade")
		status, body := post(t, base+"/api/billing/downgrade", bearerToken(t, line), `{"to":"pro"}`)
		if status != 202 {
			t.Fatalf("downgrade after a restart: %d %s", status, body)
		}
		// Nothing stops the helpers here but the kernel's parent-death signal.
		dev.signal(t, syscall.SIGKILL)
		_ = dev.wait(t)
		dev.noneLeft(t, dir)
	})
	t.Run("--stripe=mock runs stripe-mock", func(t *testing.T) {
		dev := startDev(t, bin, dir, env, "--stripe=mock")
		out := dev.stdout.String()
		if !strings.Contains(out, "Stripe     stripe-mock "+devenv.StripeMockVersion) {
			t.Errorf("the welcome text does not name stripe-mock:\n%s", out)
		}
		p := runPrintedCurl(t, printedLine(t, out, "curl -s -X POST "+base+"/api/billing/upgrade"))
		if !p.ConfirmRequired || !strings.HasPrefix(p.ConfirmToken, "pbc_") {
			t.Fatalf("first call on stripe-mock: %+v", p)
		}
		dev.signal(t, syscall.SIGINT)
		if err := dev.wait(t); err != nil {
			t.Fatalf("billingd dev after SIGINT: %v\nstderr:\n%s", err, dev.stderr.String())
		}
		dev.noneLeft(t, dir)
	})
}

// TestDevAsRoot runs billingd dev as root from a directory the postgres
// user cannot enter (mode 700, like /root and mktemp -d): the cluster, run
// by postgres, lives in a directory of its own that postgres owns, named in
// the welcome text, and the printed first call works.
func TestDevAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("billingd dev runs its cluster as user postgres only as root")
	}
	if _, err := devenv.PostgresBinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("%v: install PostgreSQL to test billingd dev", err)
	}
	t.Parallel()
	bin := billingdBinary(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	removeDataDir(t, dir)
	addr := freeAddr(t)
	dev := startDev(t, bin, dir, devEnv("", addr)) // the Stripe fake needs no stripe-mock
	out := dev.stdout.String()

	home := dev.stateDir
	if home == dir || strings.HasPrefix(home, dir+"/") {
		t.Fatalf("the cluster lives in the checkout, %s, which postgres cannot enter", home)
	}
	fi, err := os.Stat(filepath.Join(home, "pg"))
	if err != nil {
		t.Fatalf("no cluster in the directory the welcome text names: %v", err)
	}
	if owner := fi.Sys().(*syscall.Stat_t).Uid; owner == 0 {
		t.Errorf("%s/pg is owned by root, not postgres", home)
	}
	if !strings.Contains(out, "Database   a private cluster in "+home+"/pg") || !strings.Contains(out, "run by user postgres") {
		t.Errorf("the welcome text does not name the cluster and its user:\n%s", out)
	}
	p := runPrintedCurl(t, printedLine(t, out, "curl -s -X POST http://"+addr+"/api/billing/upgrade"))
	if !p.ConfirmRequired || !strings.HasPrefix(p.ConfirmToken, "pbc_") {
		t.Fatalf("first call with the printed command: %+v", p)
	}
	wantRealNumbers(t, p)
	dev.signal(t, syscall.SIGINT)
	if err := dev.wait(t); err != nil {
		t.Fatalf("billingd dev after SIGINT: %v\nstderr:\n%s", err, dev.stderr.String())
	}
	dev.noneLeft(t, dir)
}

// wantRealNumbers checks a Pro → Scale proposal made on the Stripe fake:
// unlike stripe-mock's fixtures (2009, fixed amounts), the next charge is
// within a period from now and the amount due is prorated, less than the
// whole monthly difference of $30.
func wantRealNumbers(t *testing.T, p proposal) {
	t.Helper()
	now := time.Now()
	next := p.Details.NextChargeAt
	if !next.After(now) || next.After(now.Add(31*24*time.Hour)) {
		t.Errorf("next charge at %v: not within a period from now", next)
	}
	if due := p.Details.AmountDueNowCents; due <= 0 || due >= 3000 {
		t.Errorf("amount due now %d cents: want a proration of the $30.00 difference", due)
	}
	if date := next.Format("Jan 2, 2006"); !strings.Contains(p.Summary, date) {
		t.Errorf("summary %q does not name the next charge, %s", p.Summary, date)
	}
	if due := fmt.Sprintf("$%d.%02d due now", p.Details.AmountDueNowCents/100, p.Details.AmountDueNowCents%100); !strings.Contains(p.Summary, due) {
		t.Errorf("summary %q does not say %s", p.Summary, due)
	}
}

// devProcess is a running billingd dev and the helpers it started.
type devProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	exited         chan error
	helpers        []process
	stateDir       string // where the welcome text says the data stays
}

// startDev starts billingd dev in dir with args and waits until it is ready
// and its helpers run.
func startDev(t *testing.T, bin, dir string, env []string, args ...string) *devProcess {
	t.Helper()
	d := &devProcess{cmd: exec.Command(bin, append([]string{"dev"}, args...)...), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	d.cmd.Dir, d.cmd.Env = dir, env
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() { _ = d.cmd.Process.Kill() })
	waitForOutput(t, d, "billingd dev is ready", 2*time.Minute)
	for _, e := range env {
		if addr, ok := strings.CutPrefix(e, "LISTEN_ADDR="); ok {
			waitReady(t, "http://"+addr+"/readyz")
		}
	}
	d.stateDir = dataDirOf(t, dir, d.stdout.String())
	d.helpers = descendants(d.cmd.Process.Pid)
	want := []string{"postgres"}
	if slices.Contains(args, "--stripe=mock") {
		want = append(want, "stripe-mock")
	}
	for _, want := range want {
		if !hasCommand(d.helpers, want) {
			t.Fatalf("no %s among billingd dev's child processes %v\nstderr:\n%s", want, d.helpers, d.stderr.String())
		}
	}
	return d
}

func (d *devProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait returns billingd dev's exit status, failing if it takes over a minute.
func (d *devProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.exited:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("billingd dev did not stop within a minute\nstderr:\n%s", d.stderr.String())
		return nil
	}
}

// noneLeft fails unless every helper is gone, and no process works in dir
// or in the data directory. The helpers are reparented when billingd exits
// and may take a moment to finish their shutdown.
func (d *devProcess) noneLeft(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := stillAlive(slices.Concat(d.helpers, processesIn(dir), processesIn(d.stateDir)))
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left after billingd dev stopped: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runPrintedStdio starts the mcp stdio entry billingd dev printed, with
// exactly its command, arguments and environment (BILLINGD_URL and
// BILLINGD_ACCESS_TOKEN, nothing else), and reads the subscription with it.
func runPrintedStdio(t *testing.T, out string) {
	t.Helper()
	_, after, ok := strings.Cut(out, "or over stdio")
	_, after, _ = strings.Cut(after, "\n\n")
	var cfg struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
		} `json:"mcpServers"`
	}
	if err := json.NewDecoder(strings.NewReader(after)).Decode(&cfg); !ok || err != nil {
		t.Fatalf("no stdio configuration in the welcome text (%v):\n%s", err, out)
	}
	entry := cfg.MCPServers["billingd"]
	if len(entry.Env) != 2 || entry.Env["BILLINGD_URL"] == "" || entry.Env["BILLINGD_ACCESS_TOKEN"] == "" {
		t.Fatalf("stdio entry environment %v: want BILLINGD_URL and BILLINGD_ACCESS_TOKEN only", entry.Env)
	}
	cmd := exec.Command(entry.Command, entry.Args...)
	for k, v := range entry.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs lockedBuffer
	cmd.Stderr = &logs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "dev-test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect with the printed stdio entry: %v\n%s", err, logs.String())
	}
	defer cs.Close()
	wantSuccess(t, callTool(t, cs, "get_subscription", nil), nil)
}

// devEnv is an environment with nothing configured but the listen address:
// no DATABASE_URL, no STRIPE_SECRET_KEY. stripe-mock, unless empty, is found
// on PATH, as make puts it there.
func devEnv(stripeMock, listenAddr string) []string {
	path := os.Getenv("PATH")
	if stripeMock != "" {
		path = filepath.Dir(stripeMock) + string(os.PathListSeparator) + path
	}
	return []string{"PATH=" + path, "HOME=" + os.Getenv("HOME"), "LISTEN_ADDR=" + listenAddr,
		// Tests run side by side: never the fixed default metrics port.
		"METRICS_ADDR=127.0.0.1:0"}
}

// removeDataDir removes, at the end of the test, the data directory that
// billingd dev working in dir made outside it (root's cluster), which it
// finds by the checkout file it keeps there.
func removeDataDir(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, base := range []string{"/var/lib/billingd-dev", filepath.Join(os.TempDir(), "billingd-dev")} {
			homes, _ := filepath.Glob(filepath.Join(base, "*", "checkout"))
			for _, f := range homes {
				if data, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(data)) == dir {
					_ = os.RemoveAll(filepath.Dir(f))
				}
			}
		}
	})
}

var dataDirPattern = regexp.MustCompile(`Data stays in ([^;\n]+);`)

// dataDirOf is the data directory the welcome text of billingd dev,
// working in dir, names.
func dataDirOf(t *testing.T, dir, out string) string {
	t.Helper()
	m := dataDirPattern.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the welcome text names no data directory:\n%s", out)
	}
	if filepath.IsAbs(m[1]) {
		return m[1]
	}
	return filepath.Join(dir, m[1])
}

// waitForOutput waits until d's stdout contains want, failing with both
// outputs if it exits or time runs out first.
func waitForOutput(t *testing.T, d *devProcess, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(d.stdout.String(), want) {
		select {
		case err := <-d.exited:
			t.Fatalf("billingd dev exited before %q: %v\nstdout:\n%s\nstderr:\n%s", want, err, d.stdout.String(), d.stderr.String())
		case <-deadline:
			t.Fatalf("no %q within %s\nstdout:\n%s\nstderr:\n%s", want, timeout, d.stdout.String(), d.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// printedLine returns the first line of out that starts with prefix, once
// indentation is trimmed.
// wantDevConsent reads the demo org's audit log with the welcome's admin
// token and checks the consent of its last executed change.
func wantDevConsent(t *testing.T, welcome, base string, want billing.Consent) {
	t.Helper()
	admin := bearerToken(t, printedLine(t, welcome, "curl -s '"+base+"/api/billing/audit?limit=10'"))
	req, _ := http.NewRequest("GET", base+"/api/billing/audit?limit=10", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var log struct{ Events []billing.AuditEvent }
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	for _, e := range log.Events {
		if e.Event == billing.EventOperationExecuted {
			if e.Consent == nil || *e.Consent != want {
				t.Fatalf("the welcome's agent handshake recorded consent %+v, want %+v", e.Consent, want)
			}
			return
		}
	}
	t.Fatalf("no OPERATION_EXECUTED in the audit log: %+v", log.Events)
}

func printedLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return ""
}

var bearerPattern = regexp.MustCompile(`Bearer ([A-Za-z0-9_.-]+)`)

func bearerToken(t *testing.T, line string) string {
	t.Helper()
	m := bearerPattern.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no bearer token in %q", line)
	}
	return m[1]
}

// runPrintedCurl runs a printed curl command as a user pasting it would, with
// sh, when curl is installed; otherwise it makes the same request itself.
func runPrintedCurl(t *testing.T, line string) proposal {
	t.Helper()
	var body []byte
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command("sh", "-c", line).Output()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		body = out
	} else {
		t.Log("curl not installed: making the printed request over HTTP")
		var status int
		url := strings.Fields(line)[4] // curl -s -X POST <url>
		status, body = post(t, url, bearerToken(t, line), `{"to":"scale"}`)
		if status != 202 {
			t.Fatalf("first call: %d %s", status, body)
		}
	}
	var p proposal
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("printed curl command answered %s: %v", body, err)
	}
	return p
}

// process identifies a process across pid reuse: pid plus start time.
type process struct {
	pid   int
	start string
	comm  string
}

func (p process) String() string { return fmt.Sprintf("%s(%d)", p.comm, p.pid) }

// readProcess reads /proc/<pid>/stat. ok is false for a process that is gone
// or a zombie (exited, waiting to be reaped: it runs nothing).
func readProcess(pid int) (p process, ppid int, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return process{}, 0, false
	}
	// comm is in parentheses and may hold spaces; the fields after it are
	// plain: state ppid ... starttime (field 22 of the file).
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return process{}, 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 20 || fields[0] == "Z" {
		return process{}, 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return process{pid: pid, start: fields[19], comm: s[open+1 : end]}, ppid, true
}

func allPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendants lists every process below root: children, grandchildren, ...
func descendants(root int) []process {
	children := map[int][]process{}
	for _, pid := range allPIDs() {
		if p, ppid, ok := readProcess(pid); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []process
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

func hasCommand(ps []process, comm string) bool {
	for _, p := range ps {
		if p.comm == comm {
			return true
		}
	}
	return false
}

// stillAlive returns those of ps that still run (same pid, same start
// time), each once.
func stillAlive(ps []process) []process {
	var out []process
	seen := map[int]bool{}
	for _, p := range ps {
		if now, _, ok := readProcess(p.pid); ok && now.start == p.start && !seen[p.pid] {
			seen[p.pid] = true
			out = append(out, p)
		}
	}
	return out
}

// processesIn finds processes working in dir or naming it on their command
// line: PostgreSQL's server processes run in their data directory, whatever
// title they give themselves.
func processesIn(dir string) []process {
	var out []process
	for _, pid := range allPIDs() {
		p, _, ok := readProcess(pid)
		if !ok {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(cwd, dir) || strings.Contains(string(cmdline), dir) {
			out = append(out, p)
		}
	}
	return out
}

//go:build linux

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/devenv"
	"github.com/billingd/billingd/internal/testenv"
)

// TestDev runs billingd dev as make run does, in an empty working directory
// and with no configuration: it starts its own PostgreSQL and stripe-mock,
// the curl command it prints works, and Ctrl-C (SIGINT) stops every process
// it started. Started again in the same directory, it keeps the data, and
// even SIGKILL leaves nothing behind. (Linux only: it finds processes in
// /proc, and only Linux has the parent-death signal SIGKILL relies on.)
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
		dir := devWorkDir(t)
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

	dir := devWorkDir(t)
	addr := freeAddr(t)
	base := "http://" + addr
	env := devEnv(stripeMock, addr)

	t.Run("first run, stopped with SIGINT", func(t *testing.T) {
		dev := startDev(t, bin, dir, env)
		if !strings.Contains(dev.stdout.String(), `Demo org   demo "Demo Org", on pro`) {
			t.Errorf("demo org not seeded on pro:\n%s", dev.stdout.String())
		}
		line := printedLine(t, dev.stdout.String(), "curl -s -X POST "+base+"/api/billing/upgrade")
		p := runPrintedCurl(t, line)
		if !p.ConfirmRequired || !strings.HasPrefix(p.ConfirmToken, "pbc_") || !strings.Contains(p.Summary, "Demo Org") {
			t.Fatalf("first call with the printed command: %+v", p)
		}
		// The second call, as the printed hint says: the same command with
		// the confirm_token added.
		status, body := post(t, base+"/api/billing/upgrade", bearerToken(t, line), fmt.Sprintf(`{"to":"scale","confirm_token":%q}`, p.ConfirmToken))
		if status != 200 || !strings.Contains(string(body), `"plan":"scale"`) {
			t.Fatalf("second call: %d %s", status, body)
		}
		if out := dev.stdout.String(); !strings.Contains(out, `"url": "`+base+`/mcp"`) || !strings.Contains(out, `"BILLINGD_ACCESS_TOKEN": "ey`) {
			t.Errorf("MCP client configurations missing:\n%s", out)
		}
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
		// Nothing stops the helpers here but the kernel's parent-death signal.
		dev.signal(t, syscall.SIGKILL)
		_ = dev.wait(t)
		dev.noneLeft(t, dir)
	})
}

// devProcess is a running billingd dev and the helpers it started.
type devProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	exited         chan error
	helpers        []process
}

// startDev starts billingd dev in dir and waits until it is ready and its
// helpers run.
func startDev(t *testing.T, bin, dir string, env []string) *devProcess {
	t.Helper()
	d := &devProcess{cmd: exec.Command(bin, "dev"), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
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
	d.helpers = descendants(d.cmd.Process.Pid)
	for _, want := range []string{"postgres", "stripe-mock"} {
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

// noneLeft fails unless every helper is gone, and no process works in dir.
// The helpers are reparented when billingd exits and may take a moment to
// finish their shutdown.
func (d *devProcess) noneLeft(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := stillAlive(append(d.helpers, processesIn(dir)...))
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left after billingd dev stopped: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devEnv is an environment with nothing configured but the listen address:
// no DATABASE_URL, no STRIPE_SECRET_KEY. stripe-mock is found on PATH, as
// make run puts it there.
func devEnv(stripeMock, listenAddr string) []string {
	return []string{
		"PATH=" + filepath.Dir(stripeMock) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"), "LISTEN_ADDR=" + listenAddr,
		// Tests run side by side: never the fixed default metrics port.
		"METRICS_ADDR=127.0.0.1:0",
	}
}

// devWorkDir is an empty working directory for billingd dev. As root, its
// PostgreSQL runs as user postgres, which must be able to enter it; the
// directories t.TempDir makes are private to their owner.
func devWorkDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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

package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a helper process dev mode started and must stop.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string        // where its output goes, quoted in errors
	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error         // cmd.Wait's result, valid after exited is closed
}

// startProcess starts cmd with its output appended to logPath.
//
// The child gets its own process group: a terminal's Ctrl-C goes to the
// foreground group, and it must reach billingd only, so that the server
// drains before the database goes away. deathSignal is what the kernel sends
// the child when billingd dies without stopping it (SIGKILL, a crash).
func startProcess(name string, cmd *exec.Cmd, logPath string, deathSignal syscall.Signal) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", name, err)
	}
	defer logFile.Close() // the child has its own descriptor once started
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setDeathSignal(cmd.SysProcAttr, deathSignal)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// pid is the process id, for the progress lines.
func (p *process) pid() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to grace for the process to exit; then it
// kills the whole process group, so nothing the process started survives it.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.exited:
		return fmt.Errorf("%s did not stop within %s after %s and was killed", p.name, grace, sig)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not stop", p.name, p.pid())
	}
}

// failure describes a process that did not come up: its exit status, if it
// exited, and the end of its log, which says why.
func (p *process) failure(what error) error {
	status := "still running"
	if !p.running() {
		status = fmt.Sprintf("exited: %v", p.waitErr)
	}
	return fmt.Errorf("%s: %w (%s); the end of %s:\n%s", p.name, what, status, p.logPath, logTail(p.logPath, 15))
}

// logTail returns the last n lines of a log file, indented.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// errNotReady is what waitUntil reports when the deadline passed.
var errNotReady = errors.New("not ready in time")

// waitUntil polls ready every 100 ms until it succeeds, the process exits,
// timeout passes or ctx ends (Ctrl-C while starting).
func (p *process) waitUntil(ctx context.Context, ready func(context.Context) error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if !p.running() {
			return p.failure(errors.New("exited while starting"))
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return p.failure(fmt.Errorf("%w: %v", errNotReady, err))
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1. Another
// process may take it before the child binds it; the child then fails to
// start and says so in its log.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

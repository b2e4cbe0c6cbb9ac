package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// With -pin the bench gives PostgreSQL CPUs of its own and runs billingd,
// itself (load generator, Stripe stand-in, issuer) and pgbench on the
// others, with taskset. Unpinned, every part competes for every core and
// throughput follows the CPU each operation costs; pinned, the database
// no longer shares its cores with the client side, as on a machine where
// it runs apart, and the rows show what the client side costs the
// database's own ceiling. Pinning needs a local PostgreSQL and the right
// to change its processes' affinity (root, or the server's user); the
// bench gives every PostgreSQL process all CPUs back when it ends.

// cpuSplit is which CPUs each side gets.
type cpuSplit struct {
	postgres, clients string // taskset lists, e.g. "0" and "1"
}

// splitCPUs gives PostgreSQL the first half of the machine's CPUs (at
// least one) and the client side the rest.
func splitCPUs(n int) (cpuSplit, error) {
	if n < 2 {
		return cpuSplit{}, errors.New("-pin needs at least 2 CPUs")
	}
	pg := n / 2
	return cpuSplit{postgres: cpuRange(0, pg-1), clients: cpuRange(pg, n-1)}, nil
}

func cpuRange(from, to int) string {
	if from == to {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

func (c cpuSplit) String() string {
	return fmt.Sprintf("PostgreSQL on CPUs %s; billingd, the load generator and pgbench on CPUs %s", c.postgres, c.clients)
}

// pinCPUs pins the bench's PostgreSQL server's processes (new backends
// inherit the postmaster's affinity), billingd and this process, and
// arranges for every CPU to come back at teardown (unpinCPUs).
func (e *env) pinCPUs(ctx context.Context) error {
	split, err := splitCPUs(runtime.NumCPU())
	if err != nil {
		return err
	}
	if e.postmaster, err = e.postmasterPid(ctx); err != nil {
		return fmt.Errorf("-pin: %w (the server must run on this machine)", err)
	}
	pids := serverProcesses(e.postmaster)
	e.cleanup(e.unpinCPUs)
	for _, pid := range pids {
		if err := taskset(split.postgres, pid); err != nil {
			return fmt.Errorf("-pin: PostgreSQL process %d: %w (run as root or as the server's user)", pid, err)
		}
	}
	for _, pid := range []int{e.billingd.Process.Pid, os.Getpid()} {
		if err := taskset(split.clients, pid); err != nil {
			return err
		}
	}
	e.pinned = &split
	e.log.Printf("pinned: %s", split)
	return nil
}

// unpinCPUs gives every PostgreSQL process, billingd and this process
// every CPU back. Each is tried, whatever the others do.
func (e *env) unpinCPUs() {
	all := cpuRange(0, runtime.NumCPU()-1)
	for _, pid := range append(serverProcesses(e.postmaster), e.billingd.Process.Pid, os.Getpid()) {
		_ = taskset(all, pid)
	}
	e.pinned = nil
}

// taskset sets the affinity of every thread of pid.
func taskset(cpus string, pid int) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// postmasterPid is the bench's server's postmaster, from the first line of
// postmaster.pid in its data directory: only a server on this machine
// whose data directory this process may read has one.
func (e *env) postmasterPid(ctx context.Context) (int, error) {
	var dir string
	if err := e.pool.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// serverProcesses are the postmaster and its children (backends and
// background workers); not another server's on the same machine.
func serverProcesses(postmaster int) []int {
	pids := []int{postmaster}
	files, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and brackets,
		// so the fields start after its last ")".
		end := strings.LastIndexByte(string(b), ')')
		fields := strings.Fields(string(b)[end+1:])
		if end < 0 || len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil && ppid == postmaster {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// pgbenchCommand runs pgbench on the client side's CPUs when pinned.
func (e *env) pgbenchCommand(ctx context.Context, args []string) *exec.Cmd {
	if e.pinned == nil {
		return exec.CommandContext(ctx, "pgbench", args...)
	}
	return exec.CommandContext(ctx, "taskset", append([]string{"-c", e.pinned.clients, "pgbench"}, args...)...)
}

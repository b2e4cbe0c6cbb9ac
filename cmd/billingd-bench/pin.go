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

// pinCPUs pins every PostgreSQL process (new backends inherit the
// postmaster's affinity), billingd and this process, and arranges for
// PostgreSQL to get every CPU back at teardown.
func (e *env) pinCPUs(context.Context) error {
	split, err := splitCPUs(runtime.NumCPU())
	if err != nil {
		return err
	}
	pids := processesNamed("postgres")
	if len(pids) == 0 {
		return errors.New("-pin: no local PostgreSQL processes (the server must run on this machine)")
	}
	e.cleanup(func() {
		all := cpuRange(0, runtime.NumCPU()-1)
		for _, pid := range processesNamed("postgres") {
			_ = taskset(all, pid)
		}
	})
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

// taskset sets the affinity of every thread of pid.
func taskset(cpus string, pid int) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// processesNamed lists the pids whose command name is name.
func processesNamed(name string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	var pids []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
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

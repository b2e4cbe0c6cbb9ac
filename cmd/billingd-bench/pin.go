package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// With -pin the bench gives PostgreSQL CPUs of its own and runs billingd,
// itself (load generator, Stripe stand-in, issuer) and pgbench on the
// others, with taskset. Unpinned, every part competes for every core and
// throughput follows the CPU each operation costs; pinned, the database
// no longer shares its cores with the client side, and the rows show what
// the client side costs the database's own ceiling. Every full run also
// pins its target row alone (explain.go). Pinning touches the bench's
// server only (its postmaster and the postmaster's children), billingd and
// this process, and gives each back the CPUs this process had, after the
// row or when the bench ends. It needs a server on this machine and the
// right to change its processes' affinity (root, or the server's user).

// cpuSplit is which CPUs each side gets, and what they get back.
type cpuSplit struct {
	postgres, clients string // taskset lists, e.g. "0" and "1"
	before            string // this process's CPUs before it pinned
}

// splitCPUs gives PostgreSQL the first half of cpus (at least one) and the
// client side the rest.
func splitCPUs(cpus []int) (cpuSplit, error) {
	if len(cpus) < 2 {
		return cpuSplit{}, errors.New("pinning needs at least 2 CPUs")
	}
	pg := len(cpus) / 2
	return cpuSplit{postgres: cpuList(cpus[:pg]), clients: cpuList(cpus[pg:]), before: cpuList(cpus)}, nil
}

// cpuList writes CPUs as taskset reads them: runs as ranges, "0-3,6".
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// allowedCPUs are the CPUs this process may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

func (c cpuSplit) String() string {
	return fmt.Sprintf("PostgreSQL on CPUs %s; billingd, the load generator and pgbench on CPUs %s", c.postgres, c.clients)
}

// pinCPUs pins the server's postmaster first, so that every backend it
// forks from then on inherits its CPUs, then the processes it forked
// before, then billingd and this process. A child that exits meanwhile is
// no error. unpinCPUs undoes it, at teardown at the latest.
func (e *env) pinCPUs(ctx context.Context) error {
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	split, err := splitCPUs(cpus)
	if err != nil {
		return err
	}
	if e.postmaster == 0 {
		if e.postmaster, err = e.localPostmaster(ctx); err != nil {
			return err
		}
	}
	if e.pinned == nil {
		e.cleanup(e.unpinCPUs)
	}
	e.pinned = &split
	if err := taskset(split.postgres, e.postmaster); err != nil {
		return fmt.Errorf("PostgreSQL's postmaster %d: %w (run as root or as the server's user)", e.postmaster, err)
	}
	for _, pid := range serverProcesses(e.postmaster) {
		if err := taskset(split.postgres, pid); err != nil && alive(pid) {
			return fmt.Errorf("PostgreSQL process %d: %w", pid, err)
		}
	}
	for _, pid := range []int{e.billingd.Process.Pid, os.Getpid()} {
		if err := taskset(split.clients, pid); err != nil {
			return err
		}
	}
	e.log.Printf("pinned: %s", split)
	return nil
}

// unpinCPUs gives the server's processes, billingd and this process the
// CPUs this process had before it pinned. Each is tried, whatever the
// others do.
func (e *env) unpinCPUs() {
	if e.pinned == nil {
		return
	}
	for _, pid := range append(serverProcesses(e.postmaster), e.billingd.Process.Pid, os.Getpid()) {
		_ = taskset(e.pinned.before, pid)
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

// localPostmaster finds the postmaster of a server the bench did not start
// (BENCH_DATABASE_URL), from postmaster.pid in its data directory: only a
// server on this machine whose data directory this process may read has
// one, and the pid must be a running postgres, not init (a data directory
// seen through a container's bind mount names a pid of another namespace).
func (e *env) localPostmaster(ctx context.Context) (int, error) {
	var dir string
	if err := e.pool.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return 0, fmt.Errorf("the server's data directory (its role may not read settings): %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("the server must run on this machine: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, "postmaster.pid"), err)
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if pid <= 1 || strings.TrimSpace(string(comm)) != "postgres" {
		return 0, fmt.Errorf("postmaster.pid names process %d, which is not a postgres on this machine", pid)
	}
	return pid, nil
}

// serverProcesses are the postmaster and its children (backends and
// background workers), not another server's on the same machine; none for
// no postmaster, or for init.
func serverProcesses(postmaster int) []int {
	if postmaster <= 1 {
		return nil
	}
	pids := []int{postmaster}
	files, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range files {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		if fields, err := statFields(pid, b, 2); err == nil && fields[1] == strconv.Itoa(postmaster) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive says whether pid still runs.
func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// pgbenchCommand runs pgbench on the client side's CPUs when pinned.
func (e *env) pgbenchCommand(ctx context.Context, args []string) *exec.Cmd {
	if e.pinned == nil {
		return exec.CommandContext(ctx, "pgbench", args...)
	}
	return exec.CommandContext(ctx, "taskset", append([]string{"-c", e.pinned.clients, "pgbench"}, args...)...)
}

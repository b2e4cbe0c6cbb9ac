package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// machine describes where the numbers were measured: they only compare
// with numbers from the same machine.
type machine struct {
	cpu      string
	cores    int
	memory   string
	kernel   string
	postgres string
	settings string
	goVer    string
	// syscall is what the cheapest system call (getppid) costs here. It
	// differs between machines by far more than their CPUs do (kernel
	// mitigations, virtualization: 1.07 µs on make bench's EPYC VM of 28
	// November), and every message billingd sends or receives pays at
	// least one.
	syscall time.Duration
}

func describeMachine(ctx context.Context, pool *pgxpool.Pool) machine {
	m := machine{cpu: "unknown CPU", cores: runtime.NumCPU(), goVer: runtime.Version(), syscall: syscallCost()}
	if v, ok := procField("/proc/cpuinfo", "model name"); ok {
		m.cpu = v
	}
	if v, ok := procField("/proc/meminfo", "MemTotal"); ok {
		if kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil {
			m.memory = fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	_ = pool.QueryRow(ctx, `SELECT current_setting('server_version'),
		format('fsync=%s, synchronous_commit=%s, shared_buffers=%s, max_wal_size=%s, max_connections=%s, shared_preload_libraries=''%s''',
			current_setting('fsync'), current_setting('synchronous_commit'),
			current_setting('shared_buffers'), current_setting('max_wal_size'),
			current_setting('max_connections'), current_setting('shared_preload_libraries'))`).Scan(&m.postgres, &m.settings)
	return m
}

func (m machine) String() string {
	return fmt.Sprintf("%s, %d cores, %s, %s, a system call (getppid) %.2f µs; PostgreSQL %s on the same machine (%s); %s",
		m.cpu, m.cores, m.memory, m.kernel, us(m.syscall), m.postgres, m.settings, m.goVer)
}

// syscallCost times the cheapest system call, the best of three batches
// (another process may take the CPU during one).
func syscallCost() time.Duration {
	const calls = 20000
	best := time.Duration(math.MaxInt64)
	for range 3 {
		start := time.Now()
		for range calls {
			syscall.Getppid()
		}
		best = min(best, time.Since(start)/calls)
	}
	return best
}

// memoryKiB reads a process's resident set (VmRSS) and its peak (VmHWM).
func memoryKiB(pid int) (rss, peak int64, err error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	for name, dst := range map[string]*int64{"VmRSS": &rss, "VmHWM": &peak} {
		v, ok := procField(path, name)
		if !ok {
			return 0, 0, fmt.Errorf("no %s in %s", name, path)
		}
		if *dst, err = strconv.ParseInt(strings.Fields(v)[0], 10, 64); err != nil {
			return 0, 0, err
		}
	}
	return rss, peak, nil
}

// procField is the value of the first "name: value" line of a /proc file.
func procField(path, name string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return fieldOf(string(b), name)
}

// fieldOf is the value of the first "name: value" line of text.
func fieldOf(text, name string) (string, bool) {
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// clockTick is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU is user+system time of pid, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	u, err := processUsage(pid)
	return u.cpu, err
}

// usage is what a process has used so far: CPU time, the part of it in
// the kernel, and its read and write system calls (/proc/<pid>/io's syscr
// + syscw: read, write, readv, writev and their kin, which is how Go's
// sockets and files read and write; -1 where the kernel does not keep
// them).
type usage struct {
	cpu, kernel time.Duration
	readsWrites int64
}

func (u usage) since(before usage) usage {
	d := usage{cpu: u.cpu - before.cpu, kernel: u.kernel - before.kernel, readsWrites: -1}
	if u.readsWrites >= 0 && before.readsWrites >= 0 {
		d.readsWrites = u.readsWrites - before.readsWrites
	}
	return d
}

// processUsage reads pid's usage from /proc/<pid>/stat and, if it can,
// /proc/<pid>/io.
func processUsage(pid int) (usage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	user, system, err := parseStatTimes(pid, b)
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: user + system, kernel: system, readsWrites: readsWrites(pid)}, nil
}

// readsWrites is syscr + syscw of /proc/<pid>/io, or -1.
func readsWrites(pid int) int64 {
	var n int64
	for _, field := range []string{"syscr", "syscw"} {
		v, ok := procField(fmt.Sprintf("/proc/%d/io", pid), field)
		c, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return -1
		}
		n += c
	}
	return n
}

// procReader reads /proc/<pid>/stat, schedstat and status of many
// processes again and again (backendCPU, ten times a second): it keeps
// each file open and rereads it from offset 0, which the kernel answers
// with fresh figures, one pread instead of os.ReadFile's open, fstat,
// reads and close. Those syscalls were about an eighth of the bench
// process's own CPU, counted in its CPU per operation.
type procReader struct {
	stat, schedstat, status procFiles
	schedKnown              bool // the kernel keeps schedstat (CONFIG_SCHED_INFO)
}

func newProcReader() procReader {
	_, err := os.Stat("/proc/self/schedstat")
	return procReader{stat: procFiles{name: "stat"}, schedstat: procFiles{name: "schedstat"},
		status: procFiles{name: "status"}, schedKnown: err == nil}
}

// usage is pid's CPU time (stat) and, where the kernel keeps it, its
// scheduling.
func (r *procReader) usage(pid int) (backendUsage, error) {
	cpu, err := r.cpu(pid)
	if err != nil || !r.schedKnown {
		return backendUsage{cpu: cpu}, err
	}
	sched, err := r.scheduling(pid)
	return backendUsage{cpu: cpu, scheduling: sched}, err
}

// cpu is processCPU through the reader's open files.
func (r *procReader) cpu(pid int) (time.Duration, error) {
	b, err := r.stat.read(pid)
	if err != nil {
		return 0, err
	}
	return parseStatCPU(pid, b)
}

// scheduling is what the scheduler says of a process: the times it was
// put on a CPU, its time on one and its time runnable, waiting for one
// (schedstat), and of those times how many followed a sleep it chose (a
// wake-up) and how many a preemption (status: voluntary and nonvoluntary
// context switches). On shared cores, a process preempted or woken more
// often per unit of work is put on a CPU more often.
type scheduling struct {
	known                  bool
	onCPU, runWait         time.Duration
	runs, woken, preempted int64
}

func (s scheduling) minus(o scheduling) scheduling {
	return scheduling{known: s.known, onCPU: s.onCPU - o.onCPU, runWait: s.runWait - o.runWait,
		runs: s.runs - o.runs, woken: s.woken - o.woken, preempted: s.preempted - o.preempted}
}

func (s scheduling) plus(o scheduling) scheduling {
	return scheduling{known: s.known, onCPU: s.onCPU + o.onCPU, runWait: s.runWait + o.runWait,
		runs: s.runs + o.runs, woken: s.woken + o.woken, preempted: s.preempted + o.preempted}
}

// scheduling reads pid's schedstat and the context switches in its status.
func (r *procReader) scheduling(pid int) (scheduling, error) {
	b, err := r.schedstat.read(pid)
	if err != nil {
		return scheduling{}, err
	}
	s, err := parseSchedstat(b)
	if err != nil {
		return scheduling{}, fmt.Errorf("/proc/%d/schedstat: %w", pid, err)
	}
	if b, err = r.status.read(pid); err != nil {
		return scheduling{}, err
	}
	for _, c := range []struct {
		name string
		dst  *int64
	}{{"voluntary_ctxt_switches", &s.woken}, {"nonvoluntary_ctxt_switches", &s.preempted}} {
		v, ok := fieldOf(string(b), c.name)
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return scheduling{}, fmt.Errorf("/proc/%d/status has no %s", pid, c.name)
		}
		*c.dst = n
	}
	return s, nil
}

// parseSchedstat reads "on-CPU ns, run-queue ns, times run".
func parseSchedstat(b []byte) (scheduling, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return scheduling{}, fmt.Errorf("%d fields, want 3", len(f))
	}
	var n [3]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return scheduling{}, err
		}
	}
	return scheduling{known: true, onCPU: time.Duration(n[0]), runWait: time.Duration(n[1]), runs: n[2]}, nil
}

// close closes the open files.
func (r *procReader) close() {
	r.stat.close()
	r.schedstat.close()
	r.status.close()
}

// procFiles keeps one /proc/<pid>/<name> file open per process.
type procFiles struct {
	name  string
	files map[int]*os.File
	buf   []byte
}

// read rereads pid's file with one pread. A process gone is an error
// (ESRCH) and its file is closed; so is a file longer than the buffer,
// which would be read cut short.
func (p *procFiles) read(pid int) ([]byte, error) {
	if p.files == nil {
		p.files, p.buf = map[int]*os.File{}, make([]byte, 4096)
	}
	f, ok := p.files[pid]
	if !ok {
		var err error
		if f, err = os.Open(fmt.Sprintf("/proc/%d/%s", pid, p.name)); err != nil {
			return nil, err
		}
		p.files[pid] = f
	}
	n, err := syscall.Pread(int(f.Fd()), p.buf, 0)
	if err == nil && n == len(p.buf) {
		err = fmt.Errorf("/proc/%d/%s is longer than %d bytes", pid, p.name, len(p.buf))
	}
	if err != nil || n == 0 {
		f.Close()
		delete(p.files, pid)
		return nil, cmp.Or(err, io.EOF)
	}
	return p.buf[:n], nil
}

func (p *procFiles) close() {
	for pid, f := range p.files {
		f.Close()
		delete(p.files, pid)
	}
}

// parseStatCPU reads utime and stime from the contents of /proc/<pid>/stat.
func parseStatCPU(pid int, b []byte) (time.Duration, error) {
	user, system, err := parseStatTimes(pid, b)
	return user + system, err
}

// statFields are /proc/<pid>/stat's fields from the third (state) on:
// f[0] is field 3, f[1] the parent's pid, f[11] utime (field 14). The
// command name (field 2) may hold spaces and parentheses, so they are
// counted from after its closing one, the last in the line.
func statFields(pid int, b []byte, least int) ([]string, error) {
	end := strings.LastIndexByte(string(b), ')')
	if end < 0 {
		return nil, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < least {
		return nil, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return f, nil
}

// parseStatTimes reads utime and stime.
func parseStatTimes(pid int, b []byte) (user, system time.Duration, err error) {
	f, err := statFields(pid, b, 13)
	if err != nil {
		return 0, 0, err
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of stat
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return time.Duration(utime) * clockTick, time.Duration(stime) * clockTick, nil
}

package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// procReader rereads an open /proc/<pid>/stat: the figures move as the
// process uses CPU, agree with processCPU's fresh read, and a process that
// has exited is an error, as it is to processCPU.
func TestProcReaderRereads(t *testing.T) {
	r := newProcReader()
	defer r.close()
	pid := os.Getpid()
	first, err := r.cpu(pid)
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
	} // burn CPU: at least a few clock ticks
	again, err := r.cpu(pid)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if again <= first {
		t.Errorf("reread %s after %s: the open file gave stale figures", again, first)
	}
	if d := fresh - again; d < 0 || d > 100*time.Millisecond {
		t.Errorf("reread %s, fresh read %s", again, fresh)
	}

	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	if _, err := r.cpu(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := r.cpu(cmd.Process.Pid); err == nil {
		t.Error("an exited process was read")
	}
	if _, ok := r.stat.files[cmd.Process.Pid]; ok {
		t.Error("an exited process's file is still open")
	}
}

// TestProcessUsageCountsWrites: a process's writes show in its read and
// write count; a count the kernel does not keep stays unknown.
func TestProcessUsageCountsWrites(t *testing.T) {
	pid := os.Getpid()
	before, err := processUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for range 1000 {
		if _, err := devNull.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	used, err := processUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	d := used.since(before)
	if d.readsWrites < 1000 {
		t.Errorf("%d reads and writes counted over 1000 writes", d.readsWrites)
	}
	if gone := (usage{readsWrites: -1}).since(before); gone.readsWrites != -1 {
		t.Errorf("a count the kernel does not keep became %d", gone.readsWrites)
	}
}

func TestParseStatTimesSplitsUserAndKernel(t *testing.T) {
	stat := []byte("42 (a (b) c) S 1 42 42 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 8 0 123 0 0")
	user, system, err := parseStatTimes(42, stat)
	if err != nil || user != 2500*time.Millisecond || system != 750*time.Millisecond {
		t.Errorf("got %s user, %s kernel, %v; want 2.5s, 750ms", user, system, err)
	}
	if _, _, err := parseStatTimes(42, []byte("42 (x) S 1")); err == nil {
		t.Error("a short stat was read")
	}
}

// The scheduler's counts of a thread (schedstat is one thread's, as a
// PostgreSQL backend is one process's): a sleep puts it back on a CPU as
// one more run and one more wake-up, and nothing goes backwards.
func TestSchedulingRereads(t *testing.T) {
	r := newProcReader()
	defer r.close()
	if !r.schedKnown {
		t.Skip("this kernel keeps no schedstat (CONFIG_SCHED_INFO): the bench prints n/a")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	first, err := r.usage(tid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // off the CPU and back
	again, err := r.usage(tid)
	if err != nil {
		t.Fatal(err)
	}
	d := again.scheduling.minus(first.scheduling)
	if !d.known || d.runs < 1 || d.woken < 1 || d.onCPU <= 0 || d.runWait < 0 || d.preempted < 0 {
		t.Errorf("reread %+v after %+v", again, first)
	}
}

func TestParseSchedstat(t *testing.T) {
	for _, line := range []string{"", "1 2", "1 x 3", "1 2 3 4"} {
		if s, err := parseSchedstat([]byte(line)); err == nil {
			t.Errorf("%q read as %+v", line, s)
		}
	}
	s, err := parseSchedstat([]byte("193397999 647770255 2584\n"))
	if want := (scheduling{known: true, onCPU: 193397999, runWait: 647770255, runs: 2584}); err != nil || s != want {
		t.Errorf("read as %+v, %v", s, err)
	}
}

// A backend's use over a run is its last reading less its first; one that
// appeared during the run counts from zero; without schedstat only the CPU
// is summed, and the scheduling is unknown.
func TestBackendTotals(t *testing.T) {
	at := func(cpu time.Duration, runs int64) backendUsage {
		return backendUsage{cpu: cpu, scheduling: scheduling{known: true, onCPU: cpu, runWait: time.Duration(runs), runs: runs, woken: runs - 1, preempted: 1}}
	}
	b := &backendCPU{stop: make(chan struct{}), done: make(chan struct{}), proc: procReader{schedKnown: true},
		seen: map[int][2]backendUsage{
			1: {at(time.Second, 100), at(time.Second+3*time.Millisecond, 110)}, // there all along
			2: {backendUsage{}, at(2*time.Millisecond, 5)},                     // connected during the run
		}}
	close(b.done)
	got := b.total()
	want := backendUsage{cpu: 5 * time.Millisecond, scheduling: scheduling{known: true, onCPU: 5 * time.Millisecond,
		runWait: 15, runs: 15, woken: 14, preempted: 1}}
	if got != want {
		t.Errorf("total %+v, want %+v", got, want)
	}
	b = &backendCPU{stop: make(chan struct{}), done: make(chan struct{}), seen: map[int][2]backendUsage{
		1: {backendUsage{cpu: time.Second}, backendUsage{cpu: time.Second + time.Millisecond}}}}
	close(b.done)
	if got := b.total(); got.known || got.cpu != time.Millisecond {
		t.Errorf("without schedstat: %+v", got)
	}
}

func TestFieldOf(t *testing.T) {
	status := "Name:\tpostgres\nvoluntary_ctxt_switches:\t2559\nnonvoluntary_ctxt_switches:\t25\n"
	for name, want := range map[string]string{"voluntary_ctxt_switches": "2559", "nonvoluntary_ctxt_switches": "25", "Name": "postgres"} {
		if v, ok := fieldOf(status, name); !ok || v != want {
			t.Errorf("%s read as %q, %v", name, v, ok)
		}
	}
	if v, ok := fieldOf(status, "ctxt_switches"); ok {
		t.Errorf("a missing line read as %q", v)
	}
}

// A backend that exits between two polls keeps the last reading taken
// (its last ~100 ms are missed, never its whole run), and one first seen
// after the start counts from zero.
func TestBackendRecordKeepsTheLastReading(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	b := &backendCPU{seen: map[int][2]backendUsage{}, proc: newProcReader()}
	defer b.proc.close()
	b.record([]int{gone}, true)
	before, ok := b.seen[gone]
	if !ok {
		t.Fatal("a running process was not read")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for start := time.Now(); time.Since(start) < 30*time.Millisecond; {
	} // burn CPU: at least a few clock ticks of this process's own
	b.record([]int{gone, os.Getpid()}, false)
	if b.seen[gone] != before {
		t.Errorf("an exited process's readings moved: %+v, then %+v", before, b.seen[gone])
	}
	self := b.seen[os.Getpid()]
	if self[0] != (backendUsage{}) || self[1].cpu <= 0 {
		t.Errorf("a process first seen after the start: %+v, want a zero baseline and its CPU so far", self)
	}
}

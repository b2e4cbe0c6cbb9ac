package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// statReader rereads an open /proc/<pid>/stat: the figures move as the
// process uses CPU, agree with processCPU's fresh read, and a process that
// has exited is an error, as it is to processCPU.
func TestStatReaderRereads(t *testing.T) {
	r := newStatReader()
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

// The scheduler's counts of a process: its runs only grow, and a kernel's
// line in another shape is unknown, not zero.
func TestSchedulingRereads(t *testing.T) {
	r := newStatReader()
	defer r.close()
	// schedstat is one thread's, as a PostgreSQL backend is: this one's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	first, ok := r.scheduling(tid)
	if !ok {
		t.Fatal("no /proc/<tid>/schedstat: the kernel keeps none (CONFIG_SCHED_INFO)")
	}
	time.Sleep(time.Millisecond) // off the CPU and back: one more run
	again, ok := r.scheduling(tid)
	if !ok || again.runs <= first.runs || again.runWait < first.runWait || again.preempted < first.preempted {
		t.Errorf("reread %+v after %+v", again, first)
	}
	for _, line := range []string{"", "1 2", "1 x 3", "1 2 3 4"} {
		if s, ok := parseSchedstat([]byte(line)); ok {
			t.Errorf("%q read as %+v", line, s)
		}
	}
	if s, ok := parseSchedstat([]byte("193397999 647770255 2584\n")); !ok || s.runWait != 647770255 || s.runs != 2584 {
		t.Errorf("read as %+v, %v", s, ok)
	}
	status := "Name:\tpostgres\nvoluntary_ctxt_switches:\t2559\nnonvoluntary_ctxt_switches:\t25\n"
	if n, ok := statusCount([]byte(status), "nonvoluntary_ctxt_switches:"); !ok || n != 25 {
		t.Errorf("preemptions read as %d, %v", n, ok)
	}
	if _, ok := statusCount([]byte("Name:\tx\n"), "nonvoluntary_ctxt_switches:"); ok {
		t.Error("a missing line was read")
	}
}

package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// statReader rereads an open /proc/<pid>/stat: the figures move as the
// process uses CPU, agree with processCPU's fresh read, and a process that
// has exited is an error, as it is to processCPU.
func TestStatReaderRereads(t *testing.T) {
	var r statReader
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
	if _, ok := r.files[cmd.Process.Pid]; ok {
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

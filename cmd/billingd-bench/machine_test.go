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

package main

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
)

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		cpus                      []int
		postgres, clients, before string
	}{
		{[]int{0, 1}, "0", "1", "0-1"},
		{[]int{0, 1, 2}, "0", "1-2", "0-2"},
		{[]int{0, 1, 2, 3}, "0-1", "2-3", "0-3"},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, "0-3", "4-7", "0-7"},
		// A bench started on some CPUs only splits those, and gives them back.
		{[]int{2, 3, 6, 7}, "2-3", "6-7", "2-3,6-7"},
		{[]int{1, 4, 5}, "1", "4-5", "1,4-5"},
	} {
		got, err := splitCPUs(tc.cpus)
		if err != nil || got != (cpuSplit{tc.postgres, tc.clients, tc.before}) {
			t.Errorf("splitCPUs(%v) = %+v, %v; want %s / %s, back to %s", tc.cpus, got, err, tc.postgres, tc.clients, tc.before)
		}
	}
	if _, err := splitCPUs([]int{0}); err == nil {
		t.Error("splitCPUs of 1 CPU succeeded")
	}
}

// Pinning touches the bench's server only: the postmaster and its
// children, not another process on the machine; and nothing at all without
// a postmaster, least of all init's children.
func TestServerProcessesAreThePostmastersChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	pids := serverProcesses(os.Getpid())
	if !slices.Contains(pids, os.Getpid()) || !slices.Contains(pids, child.Process.Pid) {
		t.Errorf("serverProcesses(%d) = %v, want it and its child %d", os.Getpid(), pids, child.Process.Pid)
	}
	if slices.Contains(pids, os.Getppid()) {
		t.Errorf("serverProcesses(%d) = %v holds its parent %d", os.Getpid(), pids, os.Getppid())
	}
	for _, none := range []int{0, 1, -1} {
		if pids := serverProcesses(none); len(pids) != 0 {
			t.Errorf("serverProcesses(%d) = %v, want none", none, pids)
		}
	}
}

// Nothing is given back before anything was pinned: an env that never
// pinned (no server found, one CPU) leaves every process alone.
func TestUnpinWithoutPinTouchesNothing(t *testing.T) {
	e := &env{} // no billingd, no postmaster: unpinCPUs must not reach them
	e.unpinCPUs()
	if e.pinned != nil {
		t.Errorf("pinned = %v", e.pinned)
	}
}

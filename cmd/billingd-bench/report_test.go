package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpdateDoc: make bench replaces the results between the markers of
// docs/performance.md and leaves the rest of the page as it was.
func TestUpdateDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "performance.md")
	page := "# Performance\n\nintro\n\n## Results\n\n" + docBegin + "\n\nold numbers\n" + docEnd + "\n\nwhat they say\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateDoc(path, "Measured now.\n\n### Memory\n\nnew numbers\n\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# Performance\n\nintro\n\n## Results\n\n" + docBegin + "\n\nMeasured now.\n\n### Memory\n\nnew numbers\n\n" + docEnd + "\n\nwhat they say\n"
	if string(got) != want {
		t.Errorf("page after updateDoc:\n%s\nwant:\n%s", got, want)
	}
	if err := updateDoc(filepath.Join(t.TempDir(), "missing.md"), "x"); err == nil {
		t.Error("updateDoc on a missing page succeeded")
	}
}

// TestPerformancePageHasMarkers: the page make bench writes into has its
// markers, once each.
func TestPerformancePageHasMarkers(t *testing.T) {
	data, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{docBegin, docEnd} {
		if n := strings.Count(string(data), m); n != 1 {
			t.Errorf("docs/performance.md has %d %q, want 1", n, m)
		}
	}
}

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		n                 int
		postgres, clients string
	}{{2, "0", "1"}, {3, "0", "1-2"}, {4, "0-1", "2-3"}, {8, "0-3", "4-7"}} {
		got, err := splitCPUs(tc.n)
		if err != nil || got.postgres != tc.postgres || got.clients != tc.clients {
			t.Errorf("splitCPUs(%d) = %+v, %v; want %s / %s", tc.n, got, err, tc.postgres, tc.clients)
		}
	}
	if _, err := splitCPUs(1); err == nil {
		t.Error("splitCPUs(1) succeeded")
	}
}

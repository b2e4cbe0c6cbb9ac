package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/billingd/billingd/internal/devenv"
)

// The disk's commit ceiling. With synchronous_commit on, a transaction that
// wrote a row (or locked one, which also gives it a transaction id) waits
// at COMMIT until its WAL is flushed to disk. So the disk's flushes per
// second bound how fast one client can commit, and the commits a handshake
// makes say how fast one client can shake hands. pg_test_fsync measures
// the flushes once, at the start, in the filesystem of the server's data
// directory, with the server's wal_sync_method; the round-trip tracer
// counts the commits (flushingCommits).

// commitCeiling is what pg_test_fsync measured, or why it could not.
type commitCeiling struct {
	perSecond float64 // flushes per second of one 8kB write; 0: not measured
	method    string  // the server's wal_sync_method: the line read
	dir       string  // where the test file was
	seconds   int     // pg_test_fsync's -s
	missing   string  // why there is no figure
}

// measureCommitCeiling runs pg_test_fsync next to the server's data
// directory. Failing to is no error: the report says why instead.
func (e *env) measureCommitCeiling(ctx context.Context) commitCeiling {
	c := commitCeiling{seconds: e.opts.fsyncSeconds}
	if c.seconds == 0 {
		c.missing = "not measured (-fsync-seconds=0)"
		return c
	}
	var dataDir string
	err := e.pool.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('wal_sync_method')`).Scan(&dataDir, &c.method)
	if err != nil {
		c.missing = fmt.Sprintf("could not read the data directory and wal_sync_method: %v", err)
		return c
	}
	binary, err := findPgTestFsync()
	if err != nil {
		c.missing = err.Error()
		return c
	}
	if c.dir, err = fsyncTestDir(dataDir); err != nil {
		c.missing = err.Error()
		return c
	}
	defer os.RemoveAll(c.dir)
	out, err := exec.CommandContext(ctx, binary, "-s", strconv.Itoa(c.seconds), "-f", filepath.Join(c.dir, "pg_test_fsync.out")).CombinedOutput()
	if err != nil {
		c.missing = fmt.Sprintf("pg_test_fsync: %v: %s", err, lastLine(string(out)))
		return c
	}
	if c.perSecond, err = parseFsyncRate(string(out), c.method); err != nil {
		c.missing = err.Error()
	}
	return c
}

// findPgTestFsync looks beside the server binaries the bench's own cluster
// uses (Debian keeps them in /usr/lib/postgresql/<version>/bin), then on
// PATH.
func findPgTestFsync() (string, error) {
	if dir, err := devenv.PostgresBinDir(); err == nil {
		if p := filepath.Join(dir, "pg_test_fsync"); isFile(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pg_test_fsync"); err == nil {
		return p, nil
	}
	return "", errors.New("no pg_test_fsync beside the PostgreSQL server binaries or on PATH")
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// fsyncTestDir makes a directory for pg_test_fsync's file on the data
// directory's filesystem: beside the data directory when its parent is on
// the same device (nothing foreign inside the cluster), else inside it.
// The caller removes it.
func fsyncTestDir(dataDir string) (string, error) {
	var data syscall.Stat_t
	if err := syscall.Stat(dataDir, &data); err != nil {
		return "", fmt.Errorf("the server's data directory %s is not on this machine (or not readable): %v", dataDir, err)
	}
	parent := filepath.Dir(dataDir)
	var up syscall.Stat_t
	if syscall.Stat(parent, &up) == nil && up.Dev == data.Dev {
		if dir, err := os.MkdirTemp(parent, "billingd-bench-fsync-"); err == nil {
			return dir, nil
		}
	}
	dir, err := os.MkdirTemp(dataDir, "billingd-bench-fsync-")
	if err != nil {
		return "", fmt.Errorf("no writable directory on the filesystem of %s: %v", dataDir, err)
	}
	return dir, nil
}

// fsyncLine is a method's line of pg_test_fsync's comparison, e.g.
// "        fdatasync        3293.788 ops/sec     304 usecs/op" or
// "        fsync_writethrough            n/a".
var fsyncLine = regexp.MustCompile(`^\s+(\S+)\s+(?:([0-9.]+) ops/sec|(n/a\*?))`)

// parseFsyncRate reads method's flushes per second from the section of
// pg_test_fsync's output that compares the sync methods with one 8kB
// write: a commit's WAL flush is most often one such write.
func parseFsyncRate(out, method string) (float64, error) {
	_, section, ok := strings.Cut(out, "Compare file sync methods using one 8kB write:")
	if !ok {
		return 0, errors.New("pg_test_fsync printed no one-8kB-write comparison")
	}
	section, _, _ = strings.Cut(section, "\n\n")
	for _, line := range strings.Split(section, "\n") {
		m := fsyncLine.FindStringSubmatch(line)
		if m == nil || m[1] != method {
			continue
		}
		if m[3] != "" {
			return 0, fmt.Errorf("pg_test_fsync: %s is not available on this platform", method)
		}
		return strconv.ParseFloat(m[2], 64)
	}
	return 0, fmt.Errorf("pg_test_fsync printed no line for wal_sync_method %s", method)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// rowWrite matches a statement that writes or locks a row, which gives its
// transaction an id and so a commit that waits for the WAL flush.
var rowWrite = regexp.MustCompile(`(?i)\b(insert\s+into|delete\s+from|update\s+\w+\s+set|for\s+(no\s+key\s+)?update|for\s+(key\s+)?share)\b`)

// flushingCommits counts the commits among a call's exchanges that wait
// for the WAL flush: explicit transactions (BEGIN … COMMIT) and implicit
// ones (a statement or batch outside them, which commits when its round
// trip ends) that wrote or locked a row.
func flushingCommits(exchanges []exchange) int {
	commits, inTx, wrote := 0, false, false
	for _, x := range exchanges {
		if x.kind != "query" && x.kind != "batch" {
			continue // prepares and connects commit nothing
		}
		for _, sql := range x.statements {
			switch strings.ToUpper(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sql), ";"))) {
			case "BEGIN":
				inTx, wrote = true, false
			case "COMMIT":
				if wrote {
					commits++
				}
				inTx, wrote = false, false
			case "ROLLBACK":
				inTx, wrote = false, false
			default:
				wrote = wrote || rowWrite.MatchString(sql)
			}
		}
		if !inTx && wrote {
			commits++
			wrote = false
		}
	}
	return commits
}

func (c commitCeiling) String() string {
	if c.perSecond == 0 {
		return c.missing
	}
	return fmt.Sprintf("%.0f flushes/s (pg_test_fsync -s %d, %s, one 8kB write, in %s)", c.perSecond, c.seconds, c.method, filepath.Dir(c.dir))
}

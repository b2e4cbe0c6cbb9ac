package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/postgres"
)

func mustParse(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseOptions(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The mirror runs as many connections as clients up to billingd's main
// pool: 16 by default at 64 clients, the pool's size with -pool-max-conns.
func TestMirrorRunsAtMostBillingdsMainPool(t *testing.T) {
	def, small := mustParse(t), mustParse(t, "-pool-max-conns=8")
	for _, tc := range []struct {
		o             options
		clients, want int
	}{
		{def, 1, 1}, {def, 16, 16}, {def, 64, postgres.DefaultMaxConns},
		{small, 4, 4}, {small, 64, 8},
	} {
		if got := mirrorConnections(tc.o, tc.clients); got != tc.want {
			t.Errorf("pool %d, %d clients: mirror on %d connections, want %d", tc.o.mainPool(), tc.clients, got, tc.want)
		}
	}
}

// A row whose mirror ran fewer connections than clients says so.
func TestThroughputTableNamesTheMirrorsConnections(t *testing.T) {
	row := threeRounds()
	row.clients, row.mirror = 64, 16
	var b strings.Builder
	writeThroughput(&b, []comparison{row})
	writeRounds(&b, []comparison{row})
	if got := strings.Count(b.String(), "| handshake | 64 (mirror: 16) |"); got != 2 {
		t.Errorf("64 (mirror: 16) in %d tables, want 2:\n%s", got, b.String())
	}
}

// presentTokens sends every principal's token exactly once, and stops at
// the first refusal.
func TestPresentTokensSendsEachTokenOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	refuse := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		seen[bearer]++
		mu.Unlock()
		if r.Method != http.MethodGet || r.URL.Path != "/api/billing/plans" || bearer == refuse {
			http.Error(w, "no", http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	accounts := []*account{
		{users: []user{{bearer: "a1"}, {bearer: "a2"}}},
		{users: []user{{bearer: "b1"}, {bearer: "b2"}, {bearer: "b3"}}},
	}
	c := caller{hc: srv.Client(), base: srv.URL}
	n, err := presentTokens(context.Background(), c, accounts, 2)
	if err != nil || n != 5 {
		t.Fatalf("presentTokens: %d, %v; want 5, nil", n, err)
	}
	for _, b := range []string{"a1", "a2", "b1", "b2", "b3"} {
		if seen[b] != 1 {
			t.Errorf("token %s sent %d times, want 1", b, seen[b])
		}
	}
	refuse = "b2"
	if _, err := presentTokens(context.Background(), c, accounts, 2); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused token: %v, want the 401", err)
	}
}

// TestBillingdEnvAddsToBillingdsEnvironment: each -billingd-env adds one
// setting (a value may hold commas), named among the report's flags and in
// its setup; the settings the bench makes itself are refused.
func TestBillingdEnvAddsToBillingdsEnvironment(t *testing.T) {
	o := mustParse(t, "-billingd-env=GOMAXPROCS=1", "-billingd-env=GODEBUG=madvdontneed=1,gctrace=0")
	iss, err := devissuer.New("http://issuer.test")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{opts: o, issuer: iss}
	got := e.billingdEnv()
	if tail := got[len(got)-2:]; tail[0] != "GOMAXPROCS=1" || tail[1] != "GODEBUG=madvdontneed=1,gctrace=0" {
		t.Errorf("billingd's environment ends %q, want the flag's settings", tail)
	}
	for _, kv := range got[:len(got)-2] {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(benchSettings, k) {
			t.Errorf("the bench sets %s but -billingd-env may change it: add it to benchSettings", k)
		}
	}
	if !slices.Contains(o.args, "-billingd-env=GODEBUG=madvdontneed=1,gctrace=0") {
		t.Errorf("report's flags %q do not name -billingd-env", o.args)
	}
	if d := poolDescription(o); !strings.Contains(d, "`GOMAXPROCS=1 GODEBUG=madvdontneed=1,gctrace=0`") {
		t.Errorf("setup %q does not name billingd's added environment", d)
	}
	for _, bad := range []string{"GOMAXPROCS", "=1", " GOGC=200", "DATABASE_URL=postgres://elsewhere", "LOG_FORMAT=text"} {
		if _, err := parseOptions([]string{"-billingd-env=" + bad}, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("-billingd-env=%s accepted", bad)
		}
	}
}

// A mirror with gaps is no ceiling: its results may not replace the
// published ones.
func TestMirrorGapRefusesDoc(t *testing.T) {
	if _, err := parseOptions([]string{"-mirror-gap=700us", "-doc", "docs/performance.md"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("-mirror-gap with -doc: no error")
	}
	if o, err := parseOptions([]string{"-mirror-gap=700us", "-out", "x.md"}, func(string) string { return "" }, io.Discard); err != nil || o.mirrorGap != 700*time.Microsecond {
		t.Errorf("-mirror-gap with -out: %v, gap %v", err, o.mirrorGap)
	}
}

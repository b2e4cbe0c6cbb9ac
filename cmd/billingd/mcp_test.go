package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestMCPStdioReadsOnlyItsTwoVariables: billingd mcp stdio asks the
// environment for BILLINGD_URL and BILLINGD_ACCESS_TOKEN and for nothing
// else (contract §2), so a DATABASE_URL or STRIPE_SECRET_KEY an agent's
// configuration might carry is never even looked at.
func TestMCPStdioReadsOnlyItsTwoVariables(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	getenv := func(name string) string {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, name)
		return map[string]string{
			"BILLINGD_URL": "http://127.0.0.1:1", "BILLINGD_ACCESS_TOKEN": "tok",
			"DATABASE_URL": "postgres://nobody@127.0.0.1:1/x", "STRIPE_SECRET_KEY": "sk_live_x",
		}[name]
	}
	var stdout, stderr strings.Builder
	// The agent leaves at once: the bridge ends without contacting anyone.
	if err := run(context.Background(), []string{"mcp", "stdio"}, getenv, strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("mcp stdio: %v\n%s", err, stderr.String())
	}
	slices.Sort(asked)
	if got := slices.Compact(asked); !slices.Equal(got, []string{"BILLINGD_ACCESS_TOKEN", "BILLINGD_URL"}) {
		t.Fatalf("mcp stdio read %v, want only BILLINGD_ACCESS_TOKEN and BILLINGD_URL", got)
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout %q: it carries only the protocol", stdout.String())
	}
}

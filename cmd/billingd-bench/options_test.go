package main

import (
	"io"
	"testing"

	"github.com/billingd/billingd/internal/postgres"
)

// The mirror runs at most billingd's main pool of connections: with the
// default pool, 16 at 64 clients; with -pool-max-conns, that many.
func TestMirrorRunsAtMostBillingdsMainPool(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, postgres.DefaultMaxConns},
		{[]string{"-pool-max-conns=8"}, 8},
	} {
		o, err := parseOptions(tc.args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.mainPool(); got != tc.want {
			t.Errorf("%v: main pool %d, want %d", tc.args, got, tc.want)
		}
	}
	if o, _ := parseOptions(nil, func(string) string { return "" }, io.Discard); o.rounds != 5 {
		t.Errorf("default rounds %d, want 5: a median of three moved with one odd run", o.rounds)
	}
}

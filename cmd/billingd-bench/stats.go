package main

import (
	"slices"
	"time"
)

// summary is a sample reduced to the numbers the report shows.
type summary struct {
	ops           int
	rate          float64 // operations per second in the window
	p50, p99, max time.Duration
	errors        int
	shed          int
	firstErrs     []string
	cpu           cpuPerOp
	allOps        int            // warm-up included: what cpu and stmts are per
	stmts         []statementUse // whole run, warm-up included
	waits         []waitShare    // whole run, warm-up included
	active        activeBackends // whole run, warm-up included
}

func summarize(s sample) summary {
	lat := slices.Clone(s.latencies)
	slices.Sort(lat)
	sum := summary{ops: len(lat), errors: s.errors, shed: s.shed, firstErrs: s.firstErrs, cpu: s.cpu.perOp(s.ops), allOps: s.ops, stmts: s.stmts, waits: s.waits, active: s.active}
	if s.duration > 0 {
		sum.rate = float64(len(lat)) / s.duration.Seconds()
	}
	if len(lat) > 0 {
		sum.p50, sum.p99, sum.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	}
	return sum
}

// percentile of sorted latencies, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (len(sorted)*p + 99) / 100 // ceil(n·p/100)
	return sorted[max(rank-1, 0)]
}

// ms formats a duration in milliseconds with two decimals' worth of detail.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

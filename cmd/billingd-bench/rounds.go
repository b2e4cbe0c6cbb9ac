package main

import (
	"fmt"
	"slices"
	"time"
)

// Rounds: two runs of the same code on a fresh machine once differed 2× in
// billingd's ratio to its mirror (issue 39), because whatever else the
// machine did during one side's run weighed on that side only. So each row
// runs billingd and the mirror alternately, several rounds each, and the
// report gives every figure's median over the rounds with its spread: a
// disturbance then lands on both sides, or on one round of one side, where
// the median leaves it out and the spread shows it.

// sideName names the two sides of a row.
type sideName string

const (
	sideBillingd sideName = "billingd"
	sideMirror   sideName = "mirror"
)

// scheduledRun is one run of a row: which side, in which round (from 1).
type scheduledRun struct {
	side  sideName
	round int
}

// schedule is the order a row's runs go in: billingd, mirror, billingd,
// mirror… rounds times each, so neither side always runs on a machine the
// other has just warmed (or dirtied: checkpoints, autovacuum).
func schedule(rounds int) []scheduledRun {
	runs := make([]scheduledRun, 0, 2*rounds)
	for r := 1; r <= rounds; r++ {
		runs = append(runs, scheduledRun{sideBillingd, r}, scheduledRun{sideMirror, r})
	}
	return runs
}

// alternate runs the two sides of a row in schedule's order and returns
// each side's rounds, in the order they ran.
func alternate(rounds int, runBillingd, runMirror func(round int) (summary, error)) (billingd, mirror side, err error) {
	for _, r := range schedule(rounds) {
		run, dst := runBillingd, &billingd
		if r.side == sideMirror {
			run, dst = runMirror, &mirror
		}
		s, err := run(r.round)
		if err != nil {
			return nil, nil, fmt.Errorf("%s, round %d: %w", r.side, r.round, err)
		}
		*dst = append(*dst, s)
	}
	return billingd, mirror, nil
}

// spread is one figure over a row's rounds: the median, which the report
// leads with, and the range the rounds fell in.
type spread struct {
	median, min, max float64
}

// spreadOf summarises values (one per round); the median of an even count
// is the mean of the middle two.
func spreadOf(values []float64) spread {
	if len(values) == 0 {
		return spread{}
	}
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	median := v[n/2]
	if n%2 == 0 {
		median = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{median: median, min: v[0], max: v[n-1]}
}

// relative is the range as a share of the median: 0.1 means the rounds
// lay within 10% of the median's size of each other.
func (s spread) relative() float64 {
	if s.median == 0 {
		return 0
	}
	return (s.max - s.min) / s.median
}

// side is one side's runs of a row, in the order they ran.
type side []summary

// over is one figure of the side's rounds.
func (s side) over(figure func(summary) float64) spread {
	values := make([]float64, len(s))
	for i, r := range s {
		values[i] = figure(r)
	}
	return spreadOf(values)
}

func (s side) rate() spread { return s.over(func(r summary) float64 { return r.rate }) }
func (s side) p50() spread  { return s.over(func(r summary) float64 { return ms(r.p50) }) }
func (s side) p99() spread  { return s.over(func(r summary) float64 { return ms(r.p99) }) }

// cpu is one part of the CPU per operation (billingd, bench, postgres,
// pgbench, or a sum of them) over the rounds.
func (s side) cpu(part func(cpuPerOp) float64) spread {
	return s.over(func(r summary) float64 { return part(r.cpu) })
}

// medianP50 is the median of the rounds' p50 latencies.
func (s side) medianP50() time.Duration {
	return time.Duration(s.p50().median * float64(time.Millisecond))
}

// longest is the longest operation of any round.
func (s side) longest() time.Duration {
	var m time.Duration
	for _, r := range s {
		m = max(m, r.max)
	}
	return m
}

// errors and shed count every round's.
func (s side) errors() int {
	n := 0
	for _, r := range s {
		n += r.errors
	}
	return n
}

func (s side) shed() int {
	n := 0
	for _, r := range s {
		n += r.shed
	}
	return n
}

func (s side) firstErrs() []string {
	var msgs []string
	for _, r := range s {
		msgs = append(msgs, r.firstErrs...)
	}
	return msgs
}

// typical is the round with the median throughput (the lower of the
// middle two for an even count). The tables that cannot be medians of
// numbers — statements, wait events, backends at once — show this round.
func (s side) typical() summary {
	if len(s) == 0 {
		return summary{}
	}
	order := make([]int, len(s))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case s[a].rate < s[b].rate:
			return -1
		case s[a].rate > s[b].rate:
			return 1
		}
		return 0
	})
	return s[order[(len(s)-1)/2]]
}

// ratio is billingd's throughput over the mirror's: the ratio of the two
// medians, and the range of the ratios of each round's pair (billingd's
// round n against the mirror's round n, which ran right after it).
func (c comparison) ratio() spread {
	mirror := c.pgbench.rate().median
	if mirror == 0 {
		return spread{}
	}
	var pairs []float64
	for i := range min(len(c.service), len(c.pgbench)) {
		if c.pgbench[i].rate > 0 {
			pairs = append(pairs, c.service[i].rate/c.pgbench[i].rate)
		}
	}
	r := spreadOf(pairs)
	r.median = c.service.rate().median / mirror
	return r
}

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/internal/postgres"
)

// Wait-event sampling: what the backends serving one side (billingd's or
// pgbench's, told apart by application_name) are doing, read from
// pg_stat_activity every waitPoll. A backend in a statement with no wait
// event is on a CPU (or waiting for one); any other active backend waits
// for what its wait event names (a row lock, a buffer, the WAL flush).
// The shares of those samples show where a run's statements spend their
// time, which pg_stat_statements's totals cannot.
//
// Every 20 ms: 300 samples of a 6 s row are enough for shares to a few
// points, and at every 10 ms the sampler was a tenth of this process's CPU
// (issue 39's profile), taken from the same cores as what it measures.
const waitPoll = 20 * time.Millisecond

// waitShare is one wait event's share of the samples of active backends.
type waitShare struct {
	event string // "Lock: transactionid", "LWLock: WALWrite", "CPU"
	share float64
}

type waitSampler struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	counts map[string]int
	total  int
	polls  int // samples taken
	most   int // the most backends active in one sample
}

// activeBackends is how many of a side's backends were in a statement at
// once, over the samples: on 2 cores, more active backends than cores only
// queue for a CPU (issue 39: why two runs differ).
type activeBackends struct {
	mean float64
	max  int
}

func (a activeBackends) String() string { return fmt.Sprintf("%.1f / %d", a.mean, a.max) }

// sampleWaits starts sampling app's backends until waits is called.
func sampleWaits(ctx context.Context, pool *pgxpool.Pool, app string) *waitSampler {
	w := &waitSampler{stop: make(chan struct{}), done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(waitPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				w.poll(ctx, pool, app)
			}
		}
	}()
	return w
}

func (w *waitSampler) poll(ctx context.Context, pool *pgxpool.Pool, app string) {
	rows, err := pool.Query(ctx, `SELECT coalesce(wait_event_type || ': ' || wait_event, 'CPU')
		FROM pg_stat_activity
		WHERE `+postgres.ReplicaBackends+` AND state <> 'idle'
			AND coalesce(wait_event, '') <> 'ClientRead'`, app)
	if err != nil {
		return
	}
	defer rows.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	active := 0
	for rows.Next() {
		var event string
		if rows.Scan(&event) == nil {
			w.counts[event]++
			w.total++
			active++
		}
	}
	if rows.Err() == nil {
		w.polls++
		w.most = max(w.most, active)
	}
}

// active is how many backends were active at once; call after waits.
func (w *waitSampler) active() activeBackends {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls == 0 {
		return activeBackends{}
	}
	return activeBackends{mean: float64(w.total) / float64(w.polls), max: w.most}
}

// waits stops sampling and returns the events, most frequent first.
func (w *waitSampler) waits() []waitShare {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []waitShare
	for event, n := range w.counts {
		out = append(out, waitShare{event: event, share: float64(n) / float64(w.total)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].share != out[j].share {
			return out[i].share > out[j].share
		}
		return out[i].event < out[j].event
	})
	return out
}

// formatWaits is the leading events of a run, "CPU 61%, Lock: extend 12%, …".
func formatWaits(ws []waitShare, most int) string {
	if len(ws) == 0 {
		return "(no samples)"
	}
	var parts []string
	for i, w := range ws {
		if i == most {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", w.event, 100*w.share))
	}
	return strings.Join(parts, ", ")
}

// writeWaits is the table of what each row's backends did: billingd's and
// the mirror's side by side, for every throughput row, each side's median
// round by throughput standing for its rounds.
func writeWaits(b *strings.Builder, rows []comparison) {
	b.WriteString("### Where PostgreSQL's backends wait\n\n")
	fmt.Fprintf(b, "pg_stat_activity sampled every %s over each run, for the backends of one side "+
		"(billingd's or pgbench's) that were in a statement: the share of samples on a CPU (no wait event) "+
		"and in each wait event, leading five; and how many were in a statement at once (mean / most of the samples). "+
		"Each side's median round by throughput.\n\n", waitPoll)
	b.WriteString("| workload | clients | billingd's backends | active at once | pgbench's backends | active at once |\n|---|--:|---|--:|---|--:|\n")
	for _, r := range rows {
		s, p := r.service.typical(), r.pgbench.typical()
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s |\n", r.workload, r.clients, formatWaits(s.waits, 5), s.active,
			formatWaits(p.waits, 5), p.active)
	}
	b.WriteString("\n")
}

// writeScheduling is the table of how the scheduler treated each side's
// backends (/proc/<pid>/schedstat and status): per operation, the times a
// backend was put on a CPU, after a wake-up and after a preemption, the
// CPU it used per time there, and how long backends waited, runnable, for
// a CPU. billingd's backends spend more CPU than the mirror's on the same
// statements (docs/performance.md); these counts say whether as more
// times on a CPU, as dearer ones, or both.
func writeScheduling(b *strings.Builder, rows []comparison) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("### How the backends were scheduled\n\n")
	b.WriteString("From /proc/<pid>/schedstat and status of each side's backends over each run, per operation: the times a " +
		"backend was put on a CPU, of them after a sleep it chose (woken: waiting for its client, a lock, a disk) and after " +
		"a preemption (voluntary and nonvoluntary context switches); the CPU a backend used per time on a CPU (schedstat's " +
		"own CPU time over its count, per round); and the time backends spent runnable, waiting for a CPU. " +
		"Medians of the rounds, spread in brackets; n/a where the kernel keeps no schedstat.\n\n")
	b.WriteString("| workload | clients | billingd's backends: on a CPU | woken | preempted | µs per time | waiting for a CPU, µs | " +
		"the mirror's: on a CPU | woken | preempted | µs per time | waiting for a CPU, µs |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.workload, clientsCell(r), schedulingCells(r.service), schedulingCells(r.pgbench))
	}
	b.WriteString("\n")
}

// schedulingCells are one side's five cells of writeScheduling, over the
// rounds whose scheduling the kernel kept.
func schedulingCells(s side) string {
	var known side
	for _, r := range s {
		if r.cpu.postgresSched.known {
			known = append(known, r)
		}
	}
	if len(known) == 0 {
		return "n/a | n/a | n/a | n/a | n/a"
	}
	over := func(figure func(schedPerOp) float64) spread {
		return known.over(func(r summary) float64 { return figure(r.cpu.postgresSched) })
	}
	return fmt.Sprintf("%s | %s | %s | %s | %s",
		withSpread("%.1f", over(func(k schedPerOp) float64 { return k.runs })),
		withSpread("%.1f", over(func(k schedPerOp) float64 { return k.woken })),
		withSpread("%.1f", over(func(k schedPerOp) float64 { return k.preempted })),
		withSpread("%.0f", over(schedPerOp.perRun)),
		withSpread("%.0f", over(func(k schedPerOp) float64 { return k.waitingForCPU })))
}

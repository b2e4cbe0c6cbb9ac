package main

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// On this kind of machine the database, billingd and the load generator
// share a few cores, so whichever path costs more CPU per operation gets
// fewer operations per second. The bench measures where the CPU goes: the
// billingd process, this process (load generator, Stripe stand-in, issuer),
// the PostgreSQL backends serving a run, and pgbench itself.

// cpuUse is CPU time one run used, per part, and of billingd's the part in
// the kernel, its read and write system calls, and the bytes its runtime
// allocated (readAllocated).
type cpuUse struct {
	billingd, bench, postgres, pgbench time.Duration
	billingdKernel                     time.Duration
	billingdReadsWrites                int64
	billingdAllocBytes                 int64
	postgresSched                      scheduling // of the side's backends; runs < 0: unknown
}

// cpuPerOp is cpuUse divided by the operations of the run, in µs (system
// calls and the backends' runs in counts, allocation in KiB).
type cpuPerOp struct {
	billingd, bench, postgres, pgbench float64
	billingdKernel                     float64
	billingdReadsWrites                float64
	billingdAllocKiB                   float64
	postgresRunWait, postgresRuns      float64
	postgresPreempted                  float64
}

func (u cpuUse) perOp(ops int) cpuPerOp {
	if ops == 0 {
		return cpuPerOp{}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(ops) }
	c := cpuPerOp{billingd: per(u.billingd), bench: per(u.bench), postgres: per(u.postgres), pgbench: per(u.pgbench),
		billingdKernel: per(u.billingdKernel), billingdReadsWrites: float64(u.billingdReadsWrites) / float64(ops),
		billingdAllocKiB: float64(u.billingdAllocBytes) / 1024 / float64(ops)}
	if u.billingdReadsWrites < 0 { // not kept by this kernel
		c.billingdReadsWrites = -1
	}
	c.postgresRunWait, c.postgresRuns = per(u.postgresSched.runWait), float64(u.postgresSched.runs)/float64(ops)
	c.postgresPreempted = float64(u.postgresSched.preempted) / float64(ops)
	if u.postgresSched.runs < 0 {
		c.postgresRunWait, c.postgresRuns, c.postgresPreempted = -1, -1, -1
	}
	return c
}

// total is what one operation cost the machine.
func (c cpuPerOp) total() float64 { return c.billingd + c.bench + c.postgres + c.pgbench }

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU follows the CPU time of the PostgreSQL backends of one
// application_name (and its pools': "billingd executions" is billingd's)
// while a run goes on, and how the scheduler treated them (scheduling).
// Backends come and go (pgbench's leave when it ends), so it polls: for
// each backend it keeps the first and the last reading, and a backend
// first seen after the start counts from zero. A backend's last ~100 ms
// before it exits are missed.
type backendCPU struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	seen map[int][2]backendReading // pid → first, last
	stat statReader                // under mu
}

// backendReading is one backend's counters at one poll.
type backendReading struct {
	cpu time.Duration
	scheduling
}

// backendUse is what a side's backends used over a run: CPU, and the
// scheduler's counts (runs < 0: this kernel keeps no schedstat).
type backendUse struct {
	cpu time.Duration
	scheduling
}

const backendPoll = 100 * time.Millisecond

func watchBackends(ctx context.Context, pool *pgxpool.Pool, app string) *backendCPU {
	b := &backendCPU{stop: make(chan struct{}), done: make(chan struct{}), seen: map[int][2]backendReading{}, stat: newStatReader()}
	b.poll(ctx, pool, app, true)
	go func() {
		defer close(b.done)
		t := time.NewTicker(backendPoll)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				b.poll(ctx, pool, app, false)
				return
			case <-ctx.Done():
				return
			case <-t.C:
				b.poll(ctx, pool, app, false)
			}
		}
	}()
	return b
}

// poll reads the backends' CPU; at the start, a backend's reading is its
// baseline, later a new backend's baseline is zero.
func (b *backendCPU) poll(ctx context.Context, pool *pgxpool.Pool, app string, start bool) {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 OR application_name LIKE $1 || ' %'`, app)
	if err != nil {
		return
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		cpu, err := b.stat.cpu(pid)
		if err != nil {
			continue // gone already, or not on this machine
		}
		now := backendReading{cpu: cpu}
		if sched, ok := b.stat.scheduling(pid); ok {
			now.scheduling = sched
		} else {
			now.runs = -1
		}
		r, ok := b.seen[pid]
		if !ok && start {
			r[0] = now
		}
		r[1] = now
		b.seen[pid] = r
	}
}

// total stops watching and returns what the backends used.
func (b *backendCPU) total() backendUse {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stat.close()
	var sum backendUse
	for _, r := range b.seen {
		sum.cpu += r[1].cpu - r[0].cpu
		if r[1].runs < 0 || sum.runs < 0 {
			sum.runs = -1
			continue
		}
		sum.runWait += r[1].runWait - r[0].runWait
		sum.runs += r[1].runs - r[0].runs
		sum.preempted += r[1].preempted - r[0].preempted
	}
	return sum
}

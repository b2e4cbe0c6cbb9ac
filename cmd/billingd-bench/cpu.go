package main

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/internal/postgres"
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
	postgresSched                      scheduling // of the side's backends, when the kernel keeps schedstat
}

// cpuPerOp is cpuUse divided by the operations of the run, in µs (system
// calls in calls, allocation in KiB).
type cpuPerOp struct {
	billingd, bench, postgres, pgbench float64
	billingdKernel                     float64
	billingdReadsWrites                float64
	billingdAllocKiB                   float64
	postgresSched                      schedPerOp
}

// schedPerOp is the side's backends' scheduling per operation: times on a
// CPU, of them after a wake-up and after a preemption (counts), and their
// time on a CPU and waiting for one (µs). known is false where the kernel
// keeps no schedstat.
type schedPerOp struct {
	known                  bool
	runs, woken, preempted float64
	onCPU, waitingForCPU   float64
}

// perRun is the CPU a backend used per time on a CPU, µs.
func (s schedPerOp) perRun() float64 {
	if s.runs == 0 {
		return 0
	}
	return s.onCPU / s.runs
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
	if sc := u.postgresSched; sc.known {
		count := func(n int64) float64 { return float64(n) / float64(ops) }
		c.postgresSched = schedPerOp{known: true, runs: count(sc.runs), woken: count(sc.woken), preempted: count(sc.preempted),
			onCPU: per(sc.onCPU), waitingForCPU: per(sc.runWait)}
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
	seen map[int][2]backendUsage // pid → first, last
	proc procReader              // under mu
}

// backendUsage is one backend's counters at one poll, or what a side's
// backends used over a run.
type backendUsage struct {
	cpu time.Duration
	scheduling
}

const backendPoll = 100 * time.Millisecond

// benchApplicationName is the application_name of the bench's own pool.
// It must not be billingd's: the bench tells billingd's backends from
// pgbench's by application_name, and while it was "billingd" the bench's
// own polls of pg_stat_activity (every 20 and 100 ms, on its own backends)
// counted as billingd's PostgreSQL CPU, wake-ups, waits and active
// backends, and never as the mirror's (issue 39, 29 November).
const benchApplicationName = "billingd-bench"

// The application_name of each side's connections: billingd's pools are
// billingdApplicationName and "billingd executions" (postgres.Open), the
// mirror's are pgbench's. The bench sets both in the URLs it hands out.
const (
	billingdApplicationName = "billingd"
	pgbenchApplicationName  = "pgbench"
)

// sidePids lists the backends of app's side: those named app or one of its
// pools' ("billingd executions"), in the bench's database (a shared server
// may hold other billingds).
func sidePids(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, app string) ([]int, error) {
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE `+postgres.ReplicaBackends, app)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

func watchBackends(ctx context.Context, pool *pgxpool.Pool, app string) *backendCPU {
	b := &backendCPU{stop: make(chan struct{}), done: make(chan struct{}), seen: map[int][2]backendUsage{}, proc: newProcReader()}
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

// poll reads the backends' CPU and scheduling; at the start, a backend's
// reading is its baseline, later a new backend's baseline is zero.
func (b *backendCPU) poll(ctx context.Context, pool *pgxpool.Pool, app string, start bool) {
	pids, err := sidePids(ctx, pool, app)
	if err != nil {
		return
	}
	b.record(pids, start)
}

// record reads each of pids; one that cannot be read keeps its last
// reading.
func (b *backendCPU) record(pids []int, start bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		now, err := b.proc.usage(pid)
		if err != nil {
			continue // gone already (its last reading stands), or not on this machine
		}
		r, ok := b.seen[pid]
		if !ok && start {
			r[0] = now
		}
		r[1] = now
		b.seen[pid] = r
	}
}

// total stops watching and returns what the backends used; its
// scheduling is known when the kernel keeps schedstat.
func (b *backendCPU) total() backendUsage {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc.close()
	sum := backendUsage{scheduling: scheduling{known: b.proc.schedKnown}}
	for _, r := range b.seen {
		sum.cpu += r[1].cpu - r[0].cpu
		sum.scheduling = sum.plus(r[1].scheduling.minus(r[0].scheduling))
	}
	return sum
}

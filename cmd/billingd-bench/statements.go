package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Where PostgreSQL's time goes, statement by statement. billingd and its
// pgbench mirror send the same statements, so when PostgreSQL spends more
// CPU per billingd call, the difference is either in a statement (another
// plan, more planning, lock waits) or around them (protocol messages,
// connections, health checks). pg_stat_statements tells the two apart: the
// bench resets it before each run and reads it after, and the report sets
// the statements' time against the backends' CPU. It needs the module in
// shared_preload_libraries (a restart); without it the bench says so and
// measures everything else.

// statementUse is one statement's share of a run.
type statementUse struct {
	query string
	calls int64
	exec  time.Duration // execution time, lock and WAL waits included
	plan  time.Duration // planning time (pg_stat_statements.track_planning)
	pages int64         // shared buffers hit or read: a plan reading more pages shows here
}

// statementStats reports whether pg_stat_statements can be read, creating
// the extension in the bench database when the server preloads it.
func (e *env) statementStats(ctx context.Context) bool {
	var preload string
	if err := e.pool.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&preload); err != nil {
		return false
	}
	if !strings.Contains(preload, "pg_stat_statements") {
		return false
	}
	_, err := e.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err == nil
}

// resetStatements forgets what the statements of this database did so far.
func (e *env) resetStatements(ctx context.Context) error {
	if !e.statements {
		return nil
	}
	_, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	return err
}

// readStatements is what the statements of this database did since the
// last reset, busiest first; the bench's own polling is left out, and so
// are statements run inside others (the audit chain's trigger), whose time
// their top-level statement's includes.
func (e *env) readStatements(ctx context.Context) ([]statementUse, error) {
	if !e.statements {
		return nil, nil
	}
	rows, err := e.pool.Query(ctx, `
		SELECT query, calls, total_exec_time, total_plan_time, shared_blks_hit + shared_blks_read FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel
			AND query NOT LIKE '%pg_stat_activity%' AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time + total_plan_time DESC`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []statementUse
	for rows.Next() {
		var s statementUse
		var execMS, planMS float64
		if err := rows.Scan(&s.query, &s.calls, &execMS, &planMS, &s.pages); err != nil {
			return nil, err
		}
		s.exec, s.plan = msDuration(execMS), msDuration(planMS)
		out = append(out, s)
	}
	return out, rows.Err()
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// statementKey names a statement in the report: its first words, which
// tell billingd's statements apart.
func statementKey(query string) string {
	words := strings.Fields(query)
	if len(words) > 6 {
		words = words[:6]
	}
	return strings.Join(words, " ")
}

// perOp is a statement's calls, time and pages per operation of the run.
func (s statementUse) perOp(ops int) (calls, us, pages float64) {
	if ops == 0 {
		return 0, 0, 0
	}
	n := float64(ops)
	return float64(s.calls) / n, float64((s.exec + s.plan).Microseconds()) / n, float64(s.pages) / n
}

// writeStatements sets each statement's time per operation, billingd's
// against pgbench's, next to the backends' CPU per operation, for the
// 16-client rows (1-client rows too: there nothing waits on anything; and
// 64, where contention shows). Each side's median round by throughput
// stands for the row: statements and CPU come from the same run.
func writeStatements(b *strings.Builder, rows []comparison) {
	var shown []comparison
	for _, r := range rows {
		if (r.clients == 1 || r.clients == 16 || r.clients == 64) && len(r.service.typical().stmts)+len(r.pgbench.typical().stmts) > 0 {
			shown = append(shown, r)
		}
	}
	if len(shown) == 0 {
		b.WriteString("### PostgreSQL's time per statement\n\npg_stat_statements is not in the server's shared_preload_libraries, so this run has no per-statement table.\n\n")
		return
	}
	b.WriteString("### PostgreSQL's time per statement\n\n")
	b.WriteString("From pg_stat_statements, reset before each run: calls and time (planning + execution, waits for locks " +
		"and WAL flushes included) per operation, in each side's median round by throughput. Backend CPU is that round's " +
		"PostgreSQL CPU per operation; " +
		"\"around the statements\" is backend CPU minus the statements' time: parsing, binding, protocol messages, " +
		"commits of implicit transactions (negative when the statements waited more than they computed).\n\n")
	for _, r := range shown {
		fmt.Fprintf(b, "#### %s, %d client(s)\n\n| statement | billingd calls/op | µs/op | pages/op | pgbench calls/op | µs/op | pages/op |\n|---|--:|--:|--:|--:|--:|--:|\n", r.workload, r.clients)
		svcRound, pgRound := r.service.typical(), r.pgbench.typical()
		type pair struct{ svc, pg statementUse }
		byKey := map[string]*pair{}
		var keys []string
		for side, list := range [][]statementUse{svcRound.stmts, pgRound.stmts} {
			for _, s := range list {
				k := statementKey(s.query)
				p, ok := byKey[k]
				if !ok {
					p = &pair{}
					byKey[k] = p
					keys = append(keys, k)
				}
				dst := &p.svc
				if side == 1 {
					dst = &p.pg
				}
				dst.calls += s.calls
				dst.exec += s.exec
				dst.plan += s.plan
				dst.pages += s.pages
			}
		}
		var svcSum, pgSum float64
		for _, k := range keys {
			p := byKey[k]
			sc, su, sp := p.svc.perOp(svcRound.allOps)
			pc, pu, pp := p.pg.perOp(pgRound.allOps)
			if sc < 0.01 && pc < 0.01 {
				continue // the bench's own queries, BEGIN/COMMIT of other work
			}
			svcSum += su
			pgSum += pu
			fmt.Fprintf(b, "| `%s` | %.2f | %.0f | %.1f | %.2f | %.0f | %.1f |\n", strings.ReplaceAll(k, "|", "\\|"), sc, su, sp, pc, pu, pp)
		}
		fmt.Fprintf(b, "| statements | | %.0f | | | %.0f | |\n", svcSum, pgSum)
		fmt.Fprintf(b, "| backend CPU | | %.0f | | | %.0f | |\n", svcRound.cpu.postgres, pgRound.cpu.postgres)
		fmt.Fprintf(b, "| around the statements | | %.0f | | | %.0f | |\n\n", svcRound.cpu.postgres-svcSum, pgRound.cpu.postgres-pgSum)
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/billingd/billingd/internal/app"
)

// roundTripCounter is a pgx tracer that notes every exchange with the
// server: a query (BEGIN and COMMIT are queries too), a batch (sent as one
// pipeline: one round trip however many statements), a prepare (a
// statement's first use on a connection) and a connect.
type roundTripCounter struct {
	mu    sync.Mutex
	trips []exchange
}

// exchange is one round trip and the statements it carried.
type exchange struct {
	kind       string // query, batch, prepare or connect
	statements []string
}

func (x exchange) String() string {
	names := make([]string, len(x.statements))
	for i, s := range x.statements {
		names[i] = statementName(s)
	}
	switch x.kind {
	case "batch":
		return "batch[" + strings.Join(names, "; ") + "]"
	case "query":
		return names[0]
	}
	return strings.TrimSpace(x.kind + " " + strings.Join(names, ""))
}

var (
	_ pgx.QueryTracer   = (*roundTripCounter)(nil)
	_ pgx.BatchTracer   = (*roundTripCounter)(nil)
	_ pgx.PrepareTracer = (*roundTripCounter)(nil)
	_ pgx.ConnectTracer = (*roundTripCounter)(nil)
)

func (c *roundTripCounter) note(kind string, statements ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips = append(c.trips, exchange{kind: kind, statements: statements})
}

// take returns the exchanges noted since the last take.
func (c *roundTripCounter) take() []exchange {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trips
	c.trips = nil
	return t
}

func (c *roundTripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.note("query", d.SQL)
	return ctx
}

func (c *roundTripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	c.note("batch", sqls...)
	return ctx
}

func (c *roundTripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *roundTripCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	c.note("prepare", d.SQL)
	return ctx
}

func (c *roundTripCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *roundTripCounter) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	c.note("connect")
	return ctx
}

func (c *roundTripCounter) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

// statementName is the first words of a statement, enough to tell which.
func statementName(sql string) string {
	words := strings.Fields(sql)
	return strings.Join(words[:min(len(words), 3)], " ")
}

// roundTrips is how many exchanges with the database one kind of call made.
type roundTrips struct {
	call             string
	min, median, max int
	example          []exchange // the exchanges of the last call
	commits          int        // median commits that wait for the WAL flush (ceiling.go)
	// unmirrored lists statements the call sent that its pgbench script
	// does not run: then the ratio is not against billingd's own SQL.
	unmirrored []string
}

// roundTripSamples is how many calls of each kind are counted.
const roundTripSamples = 50

// countRoundTrips runs billingd in process, built by app.New exactly as the
// binary builds it but with a counting tracer, and makes the sample calls
// through its HTTP handler with the bench's tokens. Statement caches are
// warmed first: a statement's first use on each connection adds a prepare.
func (e *env) countRoundTrips(ctx context.Context) ([]roundTrips, error) {
	cfg, err := e.serviceConfig()
	if err != nil {
		return nil, err
	}
	counter := &roundTripCounter{}
	a, err := app.New(ctx, cfg, app.Options{Tracer: counter})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	c := caller{hc: &http.Client{Transport: handlerTransport{a.Handler}}, base: e.baseURL}
	accounts := e.accounts[:min(len(e.accounts), 10)]
	for i := range 20 {
		if _, err := c.do(ctx, handshake, accounts[i%len(accounts)]); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	counter.take()
	var proposes, confirms [][]exchange
	for i := range roundTripSamples {
		p, cf, err := c.countedHandshake(ctx, accounts[i%len(accounts)], counter)
		if err != nil {
			return nil, err
		}
		proposes, confirms = append(proposes, p), append(confirms, cf)
	}
	// The propose script mirrors first calls; the handshake script both.
	pt, err := tripStats("propose (first call)", proposes, propose)
	if err != nil {
		return nil, err
	}
	ct, err := tripStats("confirm (second call)", confirms, handshake)
	return []roundTrips{pt, ct}, err
}

// countedHandshake is caller.do for a handshake, taking the counter's notes
// after each of the two calls.
func (c caller) countedHandshake(ctx context.Context, a *account, counter *roundTripCounter) (proposeTrips, confirmTrips []exchange, err error) {
	u := a.nextUser()
	path, to := a.nextChange()
	token, err := c.post(ctx, path, u.bearer, changeBody{To: to}, http.StatusAccepted)
	if err != nil {
		return nil, nil, err
	}
	proposeTrips = counter.take()
	if _, err := c.post(ctx, path, u.bearer, changeBody{To: to, ConfirmToken: token}, http.StatusOK); err != nil {
		return nil, nil, err
	}
	a.plan = to
	return proposeTrips, counter.take(), nil
}

// tripStats sums up the calls of one kind and checks that script w runs
// every statement they sent.
func tripStats(call string, calls [][]exchange, w workload) (roundTrips, error) {
	counts, commits := make([]int, len(calls)), make([]int, len(calls))
	var sent []string
	for i, c := range calls {
		counts[i], commits[i] = len(c), flushingCommits(c)
		for _, x := range c {
			if x.kind == "query" || x.kind == "batch" {
				sent = append(sent, x.statements...)
			}
		}
	}
	slices.Sort(counts)
	slices.Sort(commits)
	missing, err := unmirrored(w, sent)
	return roundTrips{call: call, min: counts[0], median: counts[len(counts)/2], max: counts[len(counts)-1],
		example: calls[len(calls)-1], commits: commits[len(commits)/2], unmirrored: missing}, err
}

// handlerTransport sends requests straight to an http.Handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

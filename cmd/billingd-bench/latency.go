package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// At Stripe's pace (issue 20): the same billingd, the stand-in slowed to
// Stripe's real latency by stripepaytest's Pacer, full handshakes back to
// back. Throughput is then bound by latency, not CPU: a client cannot do
// more than one handshake per preview + update, so the limit is clients ÷
// (preview + update). What the rows show is whether billingd gets there:
// first calls must not wait for the connections second calls hold while
// Stripe answers, and second calls beyond what billingd holds open must be
// turned away at once (503 upstream_unavailable, Retry-After), their token
// still good: the client waits and sends the same second call again.

// stripePace is the latency the stand-in answers with.
type stripePace struct {
	preview, update, read stripepaytest.Latency
}

func paceOf(o options) stripePace {
	return stripePace{
		preview: stripepaytest.Latency{Typical: o.latencyPreview},
		update:  stripepaytest.Latency{Typical: o.latencyUpdate, Tail: o.latencyTail, TailShare: o.latencyTailShare},
		read:    stripepaytest.Latency{Typical: o.latencyRead},
	}
}

func (p stripePace) String() string {
	return fmt.Sprintf("preview %s, update %s (%.3g%% of them %s), subscription read %s",
		p.preview.Typical, p.update.Typical, 100*p.update.TailShare, p.update.Tail, p.read.Typical)
}

// latencyRow is one concurrency at Stripe's pace.
type latencyRow struct {
	clients    int
	handshakes int     // second calls answered 200 in the window
	rate       float64 // handshakes per second
	// limit is clients ÷ (preview + update + reads per handshake × read),
	// with the typical latencies; limitMean with their means (the tail's
	// share included).
	limit, limitMean float64
	readsPerOp       float64
	first, second    latencies
	shed             int // second calls answered 503 and sent again
	errors           int
	internal         int // 500 answers
	firstErrs        []string
	longest          time.Duration // the longest single call, of either kind
	conns            connPeaks
	rssKiB           int64
	// oneOrg: issue 39's row (-latency-one-org): one org per client, every
	// update at its typical latency, reads at loopback speed.
	oneOrg bool
}

func (r latencyRow) share() float64 {
	if r.limit == 0 {
		return 0
	}
	return r.rate / r.limit
}

type latencies struct{ p50, p99, max time.Duration }

func latenciesOf(d []time.Duration) latencies {
	if len(d) == 0 {
		return latencies{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return latencies{p50: percentile(s, 50), p99: percentile(s, 99), max: s[len(s)-1]}
}

// runLatency runs every -latency-clients row with the stand-in at Stripe's
// pace, then the -latency-one-org row, and puts the stand-in back to
// instant answers afterwards.
func (e *env) runLatency(ctx context.Context) ([]latencyRow, error) {
	asked := len(e.opts.latencyClients) > 0 || e.opts.latencyOneOrg > 0
	if e.pacer == nil || !asked {
		if asked {
			e.log.Printf("at Stripe's pace: not with -stripe=%s (its answers cannot be slowed); skipped", e.opts.stripe)
		}
		return nil, nil
	}
	pace := paceOf(e.opts)
	defer func() {
		for _, ep := range []stripepaytest.Endpoint{stripepaytest.CreatePreview, stripepaytest.UpdateSubscription, stripepaytest.GetSubscription} {
			e.pacer.SetLatency(ep, stripepaytest.Latency{})
		}
	}()
	var rows []latencyRow
	for _, clients := range e.opts.latencyClients {
		row, err := e.paceRow(ctx, pace, clients, e.accounts)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	if n := e.opts.latencyOneOrg; n > 0 {
		// Issue 39's shape: every update at its typical latency, reads at
		// loopback speed, each client on one org of its own.
		one := stripePace{preview: pace.preview, update: stripepaytest.Latency{Typical: pace.update.Typical}}
		row, err := e.paceRow(ctx, one, n, e.accounts[:n])
		if err != nil {
			return nil, err
		}
		row.oneOrg = true
		rows = append(rows, row)
	}
	return rows, nil
}

// paceRow runs one row at pace, clients sharing accounts.
func (e *env) paceRow(ctx context.Context, pace stripePace, clients int, accounts []*account) (latencyRow, error) {
	e.pacer.SetLatency(stripepaytest.CreatePreview, pace.preview)
	e.pacer.SetLatency(stripepaytest.UpdateSubscription, pace.update)
	e.pacer.SetLatency(stripepaytest.GetSubscription, pace.read)
	if err := e.syncPlans(ctx); err != nil {
		return latencyRow{}, err
	}
	if err := e.settle(ctx); err != nil {
		return latencyRow{}, err
	}
	row, err := e.latencyRun(ctx, pace, clients, accounts)
	if err != nil {
		return latencyRow{}, err
	}
	e.log.Printf("at Stripe's pace (%s), %3d clients on %d orgs: %5.1f handshakes/s of %5.1f (%3.0f%%; %5.1f with the tail's mean), "+
		"first p50 %6.1f p99 %6.1f ms, second p50 %6.1f p99 %6.1f ms, %d shed, %d errors (%d 500s), "+
		"longest call %s, connections held ≤ %d (executions %d) of %d open, RSS %.1f MiB",
		pace, clients, len(accounts), row.rate, row.limit, 100*row.share(), row.limitMean, ms(row.first.p50), ms(row.first.p99),
		ms(row.second.p50), ms(row.second.p99), row.shed, row.errors, row.internal,
		row.longest.Round(time.Millisecond), row.conns.held, row.conns.heldExecutions, row.conns.open, mib(row.rssKiB))
	for _, msg := range row.firstErrs {
		e.log.Printf("  error: %s", msg)
	}
	return row, nil
}

// latencyRun drives clients doing handshakes against the paced stand-in.
func (e *env) latencyRun(ctx context.Context, pace stripePace, clients int, accounts []*account) (latencyRow, error) {
	row := latencyRow{clients: clients}
	reads0, updates0 := e.pacer.Answered(stripepaytest.GetSubscription), e.pacer.Answered(stripepaytest.UpdateSubscription)
	conns := watchConnections(ctx, e.pool)
	c := caller{hc: newHTTPClient(clients), base: e.baseURL}
	win := newWindow(e.opts.latencyWarmup, e.opts.latencyDuration)
	samples := make([]paceSample, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples[i] = c.driveAtPace(ctx, clientAccounts(accounts, i, clients), win)
		}()
	}
	wg.Wait()
	c.hc.CloseIdleConnections()
	row.conns = conns.stop()
	var all paceSample
	for _, s := range samples {
		all.merge(s)
	}
	row.handshakes = len(all.second)
	row.rate = float64(row.handshakes) / win.to.Sub(win.from).Seconds()
	row.first, row.second = latenciesOf(all.first), latenciesOf(all.second)
	row.shed, row.errors, row.internal, row.firstErrs, row.longest = all.shed, all.errors, all.internal, all.firstErrs, all.longest
	if updates := e.pacer.Answered(stripepaytest.UpdateSubscription) - updates0; updates > 0 {
		row.readsPerOp = float64(e.pacer.Answered(stripepaytest.GetSubscription)-reads0) / float64(updates)
	}
	typical := pace.preview.Typical + pace.update.Typical + time.Duration(row.readsPerOp*float64(pace.read.Typical))
	mean := pace.preview.Mean() + pace.update.Mean() + time.Duration(row.readsPerOp*float64(pace.read.Mean()))
	row.limit = float64(clients) / typical.Seconds()
	row.limitMean = float64(clients) / mean.Seconds()
	var err error
	if row.rssKiB, _, err = memoryKiB(e.billingd.Process.Pid); err != nil {
		return latencyRow{}, err
	}
	return row, ctx.Err()
}

// paceSample is what one client measured at Stripe's pace.
type paceSample struct {
	first, second []time.Duration // in the window; second: the call that executed
	shed          int
	errors        int
	internal      int
	firstErrs     []string
	longest       time.Duration
}

func (s *paceSample) fail(err error) {
	s.errors++
	if len(s.firstErrs) < 3 {
		s.firstErrs = append(s.firstErrs, err.Error())
	}
}

func (s *paceSample) merge(o paceSample) {
	s.first = append(s.first, o.first...)
	s.second = append(s.second, o.second...)
	s.shed += o.shed
	s.errors += o.errors
	s.internal += o.internal
	s.longest = max(s.longest, o.longest)
	for _, e := range o.firstErrs {
		if len(s.firstErrs) < 3 {
			s.firstErrs = append(s.firstErrs, e)
		}
	}
}

// driveAtPace is one client at Stripe's pace: handshakes back to back over
// its orgs; a second call turned away with 503 is sent again, with the same
// token, after its Retry-After.
func (c caller) driveAtPace(ctx context.Context, own []*account, win window) paceSample {
	var s paceSample
	for i := 0; ctx.Err() == nil && time.Now().Before(win.to); i++ {
		a := own[i%len(own)]
		u := a.nextUser()
		path, to := a.nextChange()
		start := time.Now()
		first, err := c.call(ctx, path, u.bearer, changeBody{To: to})
		end := time.Now()
		s.longest = max(s.longest, end.Sub(start))
		if err == nil && first.status != http.StatusAccepted {
			err = first.unexpected(path)
		}
		if err != nil {
			s.countFailure(first, err)
			continue
		}
		if win.contains(end) {
			s.first = append(s.first, end.Sub(start))
		}
		for ctx.Err() == nil {
			start = time.Now()
			second, err := c.call(ctx, path, u.bearer, changeBody{To: to, ConfirmToken: first.token})
			end = time.Now()
			s.longest = max(s.longest, end.Sub(start))
			if err == nil && second.status == http.StatusServiceUnavailable && second.code == "upstream_unavailable" {
				s.shed++
				sleepCtx(ctx, max(second.retryAfter, time.Second))
				continue
			}
			if err == nil && second.status != http.StatusOK {
				err = second.unexpected(path)
			}
			if err != nil {
				s.countFailure(second, err)
				break
			}
			a.plan = to
			if win.contains(end) {
				s.second = append(s.second, end.Sub(start))
			}
			break
		}
	}
	return s
}

func (s *paceSample) countFailure(a answer, err error) {
	if a.status == http.StatusInternalServerError {
		s.internal++
	}
	s.fail(err)
}

// answer is what a handshake call got back.
type answer struct {
	status     int
	code       string // the error code, if any
	token      string // a first call's confirm_token
	retryAfter time.Duration
	body       []byte
}

func (a answer) unexpected(path string) error {
	return fmt.Errorf("POST %s: %d: %.200s", path, a.status, a.body)
}

// call makes one handshake call and reads what the load needs from the
// answer, whatever its status.
func (c caller) call(ctx context.Context, path, bearer string, body changeBody) (answer, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, body: data}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	var parsed struct {
		ConfirmToken string `json:"confirm_token"`
		Error        struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &parsed)
	a.token, a.code = parsed.ConfirmToken, parsed.Error.Code
	return a, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// connPeaks are the most connections billingd had at once during a run:
// held (in a statement or a transaction), held by the executions pool, and
// open at all.
type connPeaks struct{ held, heldExecutions, open int }

// connWatch samples billingd's connections in pg_stat_activity.
type connWatch struct {
	peaks connPeaks
	done  chan struct{}
	quit  chan struct{}
}

func watchConnections(ctx context.Context, pool *pgxpool.Pool) *connWatch {
	w := &connWatch{done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			p, err := countConnections(ctx, pool)
			if err == nil {
				w.peaks.held = max(w.peaks.held, p.held)
				w.peaks.heldExecutions = max(w.peaks.heldExecutions, p.heldExecutions)
				w.peaks.open = max(w.peaks.open, p.open)
			}
			select {
			case <-w.quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// countConnections counts billingd's connections now: held, held by the
// executions pool (named as internal/app names it), and open.
func countConnections(ctx context.Context, pool *pgxpool.Pool) (connPeaks, error) {
	var p connPeaks
	err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'idle'),
			count(*) FILTER (WHERE state <> 'idle' AND application_name = $2), count(*)
		FROM pg_stat_activity WHERE `+postgres.ReplicaBackends,
		billingdApplicationName, postgres.PoolName(billingdApplicationName, app.ExecutionsPool)).
		Scan(&p.held, &p.heldExecutions, &p.open)
	return p, err
}

func (w *connWatch) stop() connPeaks {
	close(w.quit)
	<-w.done
	return w.peaks
}

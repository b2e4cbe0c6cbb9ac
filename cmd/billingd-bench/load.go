package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// workload is what one client does per operation.
type workload string

const (
	// propose is a first call only: 202 with a confirm_token.
	propose workload = "propose"
	// handshake is a first call and the second call with its token: 202,
	// then 200 with the changed subscription.
	handshake workload = "handshake"
)

// window is the measured part of a run: operations completing in
// [from, to) count, those completing during the warm-up before do not.
type window struct{ from, to time.Time }

func newWindow(warmup, duration time.Duration) window {
	from := time.Now().Add(warmup)
	return window{from: from, to: from.Add(duration)}
}

func (w window) contains(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// sample is what a run measured: the latency of every operation completed in
// the window, and every failure at any time, warm-up included.
type sample struct {
	ops       int // completed, warm-up included: for CPU per operation
	latencies []time.Duration
	duration  time.Duration
	errors    int
	shed      int // second calls answered 503 for load, sent again after Retry-After
	firstErrs []string
	cpu       cpuUse         // over the whole run, warm-up included, like ops
	stmts     []statementUse // over the whole run, when pg_stat_statements is loaded
	waits     []waitShare    // what the side's backends did, sampled over the whole run (waits.go)
	active    activeBackends // how many of them were in a statement at once
}

func (s *sample) fail(err error) {
	s.errors++
	if len(s.firstErrs) < 3 {
		s.firstErrs = append(s.firstErrs, err.Error())
	}
}

func (s *sample) merge(o sample) {
	s.ops += o.ops
	s.latencies = append(s.latencies, o.latencies...)
	s.errors += o.errors
	s.shed += o.shed
	for _, e := range o.firstErrs {
		if len(s.firstErrs) < 3 {
			s.firstErrs = append(s.firstErrs, e)
		}
	}
}

// caller makes the handshake's REST calls for the bench's principals.
type caller struct {
	hc   *http.Client
	base string
}

// newHTTPClient keeps a connection per client alive: a load generator that
// reconnected for every call would measure TCP setup, not billingd.
func newHTTPClient(maxConns int) *http.Client {
	return &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			MaxIdleConns: maxConns, MaxIdleConnsPerHost: maxConns, IdleConnTimeout: time.Minute,
			DisableCompression: true,
		},
	}
}

// load runs clients concurrent clients doing w until the window ends. Each
// client owns its own orgs (clientAccounts): two clients confirming for one
// org at once would get consent_token_mismatch by design, which would be a
// bug in the load, not in billingd.
func load(ctx context.Context, c caller, accounts []*account, w workload, clients int, win window) sample {
	samples := make([]sample, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples[i] = c.drive(ctx, w, clientAccounts(accounts, i, clients), win)
		}()
	}
	wg.Wait()
	total := sample{duration: win.to.Sub(win.from)}
	for _, s := range samples {
		total.merge(s)
	}
	return total
}

// clientAccounts is client i's share of the orgs: every clients-th one,
// starting at i. The pgbench scripts pick orgs the same way.
func clientAccounts(accounts []*account, i, clients int) []*account {
	var own []*account
	for j := i; j < len(accounts); j += clients {
		own = append(own, accounts[j])
	}
	return own
}

// drive is one client: operations back to back, round robin over its orgs.
func (c caller) drive(ctx context.Context, w workload, own []*account, win window) sample {
	var s sample
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		if !start.Before(win.to) {
			break
		}
		shed, err := c.do(ctx, w, own[i%len(own)])
		end := time.Now()
		s.ops++
		s.shed += shed
		if err != nil {
			s.fail(err)
		} else if win.contains(end) {
			s.latencies = append(s.latencies, end.Sub(start))
		}
	}
	return s
}

// do runs one operation for a's next principal. A second call turned away
// for load (503 upstream_unavailable: every execution slot taken) is sent
// again with the same token after its Retry-After; shed counts them.
func (c caller) do(ctx context.Context, w workload, a *account) (shed int, err error) {
	u := a.nextUser()
	path, to := a.nextChange()
	token, err := c.post(ctx, path, u.bearer, changeBody{To: to}, http.StatusAccepted)
	if err != nil || w == propose {
		return 0, err
	}
	for {
		second, err := c.call(ctx, path, u.bearer, changeBody{To: to, ConfirmToken: token})
		if err == nil && second.status == http.StatusServiceUnavailable && second.code == "upstream_unavailable" && ctx.Err() == nil {
			shed++
			sleepCtx(ctx, max(second.retryAfter, time.Second))
			continue
		}
		if err == nil && second.status != http.StatusOK {
			err = second.unexpected(path)
		}
		if err != nil {
			return shed, err
		}
		a.plan = to
		return shed, nil
	}
}

type changeBody struct {
	To           string `json:"to"`
	ConfirmToken string `json:"confirm_token,omitempty"`
}

// post sends body and checks the status; on a 202 it returns the
// confirm_token of the proposal.
func (c caller) post(ctx context.Context, path, bearer string, body changeBody, want int) (string, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != want {
		return "", fmt.Errorf("POST %s: %d, want %d: %.200s", path, resp.StatusCode, want, data)
	}
	if want != http.StatusAccepted {
		return "", nil
	}
	var p struct {
		ConfirmToken string `json:"confirm_token"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.ConfirmToken == "" {
		return "", fmt.Errorf("POST %s: 202 without a confirm_token: %.200s", path, data)
	}
	return p.ConfirmToken, nil
}

// get sends a GET with bearer and wants a 200.
func (c caller) get(ctx context.Context, path, bearer string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d, want 200: %.200s", path, resp.StatusCode, data)
	}
	return nil
}

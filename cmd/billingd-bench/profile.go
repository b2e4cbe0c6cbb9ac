package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// -profile: where billingd and the load generator spend their CPU. billingd
// is started with PPROF=true (net/http/pprof on its metrics listener, never
// the API's) and asked for a CPU profile as long as the run; this process
// profiles itself with runtime/pprof over the same run. Read them with `go
// tool pprof -top DIR/billingd-handshake-16.pprof`. Profiling costs each
// process a little CPU (a signal every 10 ms), so compare CPU per operation
// of runs that were profiled alike.

// profileRun profiles one billingd run of w at clients, when -profile asks
// for it; stop ends the bench's own profile and waits for billingd's. The
// first round's files keep the names they had before rounds; later rounds'
// say which round they are.
func (e *env) profileRun(ctx context.Context, w workload, clients, round int, length time.Duration) (stop func() error, err error) {
	if e.opts.profile == "" || clients != e.opts.profileClients {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(e.opts.profile, 0o755); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%d.pprof", w, clients)
	if round > 1 {
		name = fmt.Sprintf("%s-%d-round%d.pprof", w, clients, round)
	}
	self, err := os.Create(filepath.Join(e.opts.profile, "bench-"+name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(self); err != nil {
		self.Close()
		return nil, err
	}
	seconds := int(math.Ceil(length.Seconds()))
	base := fmt.Sprintf("http://%s/debug/pprof/", e.metricsAddr)
	done := make(chan error, 2)
	go func() {
		done <- download(ctx, fmt.Sprintf("%sprofile?seconds=%d", base, seconds), filepath.Join(e.opts.profile, "billingd-"+name))
	}()
	// The allocations over the same run (a delta profile): what feeds
	// billingd's garbage collector. Read with go tool pprof -sample_index=alloc_space.
	go func() {
		done <- download(ctx, fmt.Sprintf("%sallocs?seconds=%d", base, seconds), filepath.Join(e.opts.profile, "billingd-allocs-"+name))
	}()
	return func() error {
		pprof.StopCPUProfile()
		err := self.Close()
		for range 2 {
			if derr := <-done; derr != nil && err == nil {
				err = fmt.Errorf("billingd's profiles: %w", derr)
			}
		}
		return err
	}, nil
}

func download(ctx context.Context, url, path string) error {
	body, err := get(ctx, url, nil)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// get GETs url with header and returns the body of a 200 answer; any other
// status is an error that quotes the start of the body.
func get(ctx context.Context, url string, header http.Header) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return resp.Body, nil
}

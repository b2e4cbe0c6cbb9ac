package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// tcpProxy stands between billingd and PostgreSQL so that a test can cut the
// database off (every connection dropped, new ones refused) and bring it
// back, as a network failure or a database restart would.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{ln: listen(t), target: target, conns: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(func() { p.ln.Close(); p.Cut() })
	return p
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *tcpProxy) pipe(client net.Conn) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.track(client, server)
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	_, _ = io.Copy(client, server)
	client.Close()
}

func (p *tcpProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = true
	}
}

// Cut drops every connection and refuses new ones.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Restore accepts connections again.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// viaProxy rewrites a database URL to go through the proxy.
func (p *tcpProxy) viaProxy(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// TestDatabaseOutage: while the database is unreachable billingd answers
// 503 upstream_unavailable and /readyz says so; when it comes back billingd
// recovers without a restart. Under load, no request gets anything else.
func TestDatabaseOutage(t *testing.T) {
	// Not parallel: times outage windows under load.
	h := newHarness(t)
	h.createOrg("outage", "Outage", "pro")
	u, _ := url.Parse(h.db.URL)
	proxy := startProxy(t, u.Host)
	h.env["DATABASE_URL"] = proxy.viaProxy(t, h.db.URL)
	r := h.replica()
	tok := r.user("outage", "otto")

	var mu sync.Mutex
	statuses := map[int]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				status := r.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`).Status
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		}()
	}
	// The load must see both sides of the outage: wait for its answers,
	// not for time (a loaded machine may take longer than any guess).
	count := func(status int) int {
		mu.Lock()
		defer mu.Unlock()
		return statuses[status]
	}
	waitFor(t, "the load's proposals before the outage", func() bool { return count(http.StatusAccepted) > 0 })
	proxy.Cut()
	waitFor(t, "the load's 503s during the outage", func() bool { return count(http.StatusServiceUnavailable) > 0 })
	resp := r.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`)
	wantStatus(t, resp, http.StatusServiceUnavailable, "upstream_unavailable")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	wantStatus(t, r.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable, "")
	wantStatus(t, r.do("GET", "/healthz", "", nil), http.StatusOK, "")
	proxy.Restore()
	accepted := count(http.StatusAccepted)
	waitFor(t, "the load's proposals accepted again after the outage", func() bool { return count(http.StatusAccepted) > accepted })
	close(stop)
	wg.Wait()

	wantStatus(t, r.do("GET", "/readyz", "", nil), http.StatusOK, "")
	p := r.propose(tok, "upgrade", "scale")
	second := r.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	if second.Status == http.StatusServiceUnavailable {
		// A connection of the executions' pool, idle through the outage,
		// may fail its first use: nothing was sent, and the retry the
		// answer asks for completes with the same token.
		time.Sleep(time.Second)
		second = r.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	}
	wantStatus(t, second, http.StatusOK, "")
	for status, n := range statuses {
		if status != http.StatusAccepted && status != http.StatusServiceUnavailable {
			t.Fatalf("under load during the outage: %d × status %d (all: %v)", n, status, statuses)
		}
	}
	if statuses[http.StatusServiceUnavailable] == 0 || statuses[http.StatusAccepted] == 0 {
		t.Fatalf("load saw %v: want both successes and 503s", statuses)
	}
}

// server is a billingd serve process.
type server struct {
	cmd  *exec.Cmd
	logs *lockedBuffer // written by the process while the test reads it
	done chan error
}

// startServe runs the billingd binary with h's configuration on addr.
func (h *harness) startServe(addr string) *server {
	h.t.Helper()
	s, err := h.launchServe(billingdBinary(h.t), addr)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// launchServe is startServe for a goroutine other than the test's: it
// reports failure rather than ending the test.
func (h *harness) launchServe(bin, addr string) (*server, error) {
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LOG_FORMAT=text"}
	for k, v := range h.env {
		if k != "LISTEN_ADDR" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, "LISTEN_ADDR="+addr)
	s := &server{cmd: cmd, logs: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.done <- cmd.Wait() }()
	h.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s, s.untilReady("http://" + addr + "/readyz")
}

// untilReady is untilReady for this process: it gives up as soon as the
// process exits, and says what the process logged either way (a replica
// that found its port taken, or waited on the database, says so there).
func (s *server) untilReady(url string) error {
	ready := make(chan error, 1)
	go func() { ready <- untilReady(url) }()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("%w; billingd serve logged:\n%s", err, s.logs.String())
		}
		return nil
	case err := <-s.done:
		s.done <- err // for whoever waits for the exit later
		return fmt.Errorf("billingd serve exited (%v) before %s answered; it logged:\n%s", err, url, s.logs.String())
	}
}

// confirmAt makes a second call to the server at addr.
func confirmAt(t *testing.T, addr, token, confirmToken string) (int, error) {
	body := fmt.Sprintf(`{"to":"scale","confirm_token":%q}`, confirmToken)
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/billing/upgrade", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestKilledBetweenStripeAndCommit: billingd is SIGKILLed after Stripe made
// the change but before the transaction committed. After a restart, the
// retry with the same token sends the same idempotency key, so the
// subscription changes exactly once and the audit log tells one story.
func TestKilledBetweenStripeAndCommit(t *testing.T) {
	// Not parallel: kills a billingd process at a chosen moment.
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "20s"))
	acct, tok, p := h.pendingUpgrade("crash")
	addr := freeAddr(t)
	first := h.startServe(addr)

	h.fake.FailNext(stripepaytest.Delay(10 * time.Second)) // the change is made, the answer held back
	go func() { _, _ = confirmAt(t, addr, tok, p.ConfirmToken) }()
	deadline := time.Now().Add(10 * time.Second)
	for h.fake.UpdateCount(acct.Subscription.StripeSubscriptionID) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the change never reached Stripe")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done

	h.startServe(addr)
	status, err := confirmAt(t, addr, tok, p.ConfirmToken)
	if err != nil || status != http.StatusOK {
		t.Fatalf("retry after restart: %d %v", status, err)
	}
	h.wantStripeChanges(acct, 1)
	if sub := h.subscription(tok); sub != "scale" {
		t.Fatalf("plan %s", sub)
	}
	wantEvents(t, h.auditEvents("crash"), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
}

// TestGracefulShutdown: on SIGTERM in-flight requests finish, new
// connections are refused, and billingd exits 0.
func TestGracefulShutdown(t *testing.T) {
	// Not parallel: times connections around SIGTERM.
	h := newHarness(t)
	_, tok, p := h.pendingUpgrade("term")
	addr := freeAddr(t)
	s := h.startServe(addr)

	// The second call is held at Stripe until released, so it is in flight
	// for as long as the test needs, however slowly billingd shuts down.
	pacer := h.fake.Pacer()
	release := pacer.Hold(stripepaytest.UpdateSubscription)
	defer release()
	result := make(chan int, 1)
	go func() {
		status, err := confirmAt(t, addr, tok, p.ConfirmToken)
		if err != nil {
			status = -1
		}
		result <- status
	}()
	waitFor(t, "the second call held at Stripe", func() bool { return pacer.Waiting(stripepaytest.UpdateSubscription) == 1 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Refused while the call is still held: the listener closed on SIGTERM,
	// not at the exit (which waits for the call).
	waitFor(t, "new connections refused after SIGTERM", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	release()
	if status := <-result; status != http.StatusOK {
		t.Fatalf("in-flight second call: %d", status)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("billingd did not exit after SIGTERM")
	}
	if sub := h.subscription(tok); sub != "scale" {
		t.Fatalf("plan %s", sub)
	}
}

// A replica that cannot start says why at once, rather than after the
// readiness wait: here its address is taken.
func TestLaunchServeSaysWhyItFailed(t *testing.T) {
	h := newHarness(t)
	taken := listen(t)
	defer taken.Close()
	_, err := h.launchServe(billingdBinary(t), taken.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("launch on a taken address: %v", err)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// hookReceiver is a webhook receiver: it checks every signature with the
// secrets it is given (the specification's verifier), records what it got
// and notices one event sent to one path twice at the same time.
type hookReceiver struct {
	*httptest.Server
	t       *testing.T
	hold    time.Duration // how long each answer takes
	mu      sync.Mutex
	secrets map[string]string // path → secret
	got     []hookMessage
	open    map[string]int // path+webhook-id → requests in flight
	overlap []string       // path+webhook-id sent twice at once
	done    map[string]int // path+webhook-id → answered 2xx
}

type hookMessage struct {
	path, id string
	body     map[string]any
}

func newHookReceiver(t *testing.T, hold time.Duration) *hookReceiver {
	r := &hookReceiver{t: t, hold: hold, secrets: map[string]string{}, open: map[string]int{}, done: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	key := req.URL.Path + " " + req.Header.Get("webhook-id")
	r.mu.Lock()
	secret := r.secrets[req.URL.Path]
	r.open[key]++
	if r.open[key] > 1 {
		r.overlap = append(r.overlap, key)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.open[key]--
		r.mu.Unlock()
	}()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err == nil {
		err = wh.Verify(raw, req.Header)
	}
	if err != nil {
		r.t.Errorf("delivery to %s: signature: %v", req.URL.Path, err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	time.Sleep(r.hold)
	r.mu.Lock()
	r.got = append(r.got, hookMessage{req.URL.Path, req.Header.Get("webhook-id"), body})
	r.done[key]++
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// inFlight reports whether a request is being answered.
func (r *hookReceiver) inFlight() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.open {
		if n > 0 {
			return true
		}
	}
	return false
}

func (r *hookReceiver) messages() []hookMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookMessage(nil), r.got...)
}

// waitFor waits up to timeout for a message of type typ to path.
func (r *hookReceiver) waitFor(path, typ string, timeout time.Duration) hookMessage {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, m := range r.messages() {
			if m.path == path && m.body["type"] == typ {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("no %s delivered to %s in %s (got %v)", typ, path, timeout, r.messages())
	return hookMessage{}
}

type webhookEndpoint struct {
	ID                  string   `json:"id"`
	URL                 string   `json:"url"`
	Events              []string `json:"events"`
	Format              string   `json:"format"`
	Secret              string   `json:"secret"`
	PreviousSecretUntil string   `json:"previous_secret_until"`
	Recent              []struct {
		EventID  string `json:"event_id"`
		Type     string `json:"type"`
		Status   string `json:"status"`
		Attempts int    `json:"attempts"`
	} `json:"recent_deliveries"`
}

// addEndpoint registers a webhook endpoint for org over REST.
func (h *harness) addEndpoint(org string, body any) webhookEndpoint {
	h.t.Helper()
	r := h.do("POST", "/api/billing/webhook-endpoints", h.admin(org, "hook-admin"), body)
	wantStatus(h.t, r, http.StatusCreated, "")
	var e webhookEndpoint
	r.decode(h.t, &e)
	return e
}

// runDeliverer runs the in-process replica's deliverer until the test ends.
func (h *harness) runDeliverer() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.app.RunWebhooks(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

// TestWebhookEndpointsREST: an admin creates, lists, rotates and deletes
// endpoints; the secret is shown when made and never listed; bad input is
// invalid_request; without billing:admin, insufficient_scope.
func TestWebhookEndpointsREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"))
	h.createOrg("hooks", "Hooks", "pro")
	h.createOrg("elsewhere", "Elsewhere", "pro")
	admin := h.admin("hooks", "ada")
	const path = "/api/billing/webhook-endpoints"

	wantStatus(t, h.do("GET", path, h.user("hooks", "clerk"), nil), http.StatusForbidden, "insufficient_scope")
	wantStatus(t, h.do("POST", path, h.user("hooks", "clerk"),
		map[string]any{"url": "https://hooks.example.com/", "events": []string{"approval.requested"}}),
		http.StatusForbidden, "insufficient_scope")

	e := h.addEndpoint("hooks", map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"approval.requested", "change.executed"}})
	if !strings.HasPrefix(e.Secret, "whsec_") || !strings.HasPrefix(e.ID, "we_") || e.Format != "standard" ||
		strings.Join(e.Events, ",") != "approval.requested,change.executed" {
		t.Fatalf("created %+v", e)
	}
	slack := h.addEndpoint("hooks", map[string]any{"url": "http://127.0.0.1:9/slack", "events": []string{"approval.requested"}, "format": "slack"})

	r := h.do("GET", path, admin, nil)
	wantStatus(t, r, http.StatusOK, "")
	if strings.Contains(string(r.Body), "whsec_") || strings.Contains(string(r.Body), `"secret"`) {
		t.Fatalf("the list shows a secret: %s", r.Body)
	}
	var list struct {
		Endpoints []webhookEndpoint `json:"webhook_endpoints"`
	}
	r.decode(t, &list)
	if len(list.Endpoints) != 2 || list.Endpoints[0].ID != e.ID || list.Endpoints[1].Format != "slack" {
		t.Fatalf("list %s", r.Body)
	}
	// Another org sees none of them and can delete none.
	r = h.do("GET", path, h.admin("elsewhere", "eve"), nil)
	if !strings.Contains(string(r.Body), `"webhook_endpoints":[]`) {
		t.Fatalf("another org's list: %s", r.Body)
	}
	wantStatus(t, h.do("DELETE", path+"/"+e.ID, h.admin("elsewhere", "eve"), nil), http.StatusNotFound, "not_found")

	for name, body := range map[string]string{
		"no url":        `{"events":["approval.requested"]}`,
		"no events":     `{"url":"https://hooks.example.com/","events":[]}`,
		"unknown event": `{"url":"https://hooks.example.com/","events":["approval.requested","payment.made"]}`,
		"bad format":    `{"url":"https://hooks.example.com/","events":["change.failed"],"format":"teams"}`,
		"not a url":     `{"url":"hooks","events":["change.failed"]}`,
		"ftp":           `{"url":"ftp://hooks.example.com/","events":["change.failed"]}`,
		"unknown field": `{"url":"https://hooks.example.com/","events":["change.failed"],"secret":"whsec_mine"}`,
	} {
		r := h.offSpec().do("POST", path, admin, body)
		if r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}

	r = h.do("POST", path+"/"+e.ID+"/rotate-secret", admin, nil)
	wantStatus(t, r, http.StatusOK, "")
	var rotated webhookEndpoint
	r.decode(t, &rotated)
	if !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == e.Secret || rotated.PreviousSecretUntil == "" {
		t.Fatalf("rotated %s", r.Body)
	}
	wantStatus(t, h.do("POST", path+"/we_nope/rotate-secret", admin, nil), http.StatusNotFound, "not_found")

	wantStatus(t, h.do("DELETE", path+"/"+slack.ID, admin, nil), http.StatusNoContent, "")
	wantStatus(t, h.do("DELETE", path+"/"+slack.ID, admin, nil), http.StatusNotFound, "not_found")
	r = h.do("GET", path, admin, nil)
	r.decode(t, &list)
	if len(list.Endpoints) != 1 || list.Endpoints[0].ID != e.ID {
		t.Fatalf("after delete: %s", r.Body)
	}
}

// TestWebhookPrivateAddressRefused: without WEBHOOK_ALLOW_PRIVATE_NETWORKS,
// an endpoint on loopback, a private network or over http is refused.
func TestWebhookPrivateAddressRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("ssrf", "SSRF", "pro")
	for _, url := range []string{"https://127.0.0.1/hook", "https://10.0.0.1/", "https://[::ffff:169.254.169.254]/",
		"https://100.64.0.1/", "http://hooks.example.com/"} {
		r := h.do("POST", "/api/billing/webhook-endpoints", h.admin("ssrf", "ada"),
			map[string]any{"url": url, "events": []string{"change.failed"}})
		if r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", url, r.Status, r.Body)
		}
	}
}

// TestApprovalNotifications: a change held for approval reaches the
// approvers: approval.requested carries the confirmation, the summary
// verbatim, the requester, the agent, the approvals given and needed, when
// it expires and the approval page, never a token; the Slack endpoint gets
// a message with a button to that page; approving and executing tell
// approval.granted and change.executed. The metrics count the deliveries.
func TestApprovalNotifications(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("WEBHOOK_POLL_INTERVAL", "100ms"))
	h.createOrg("notify", "Notify", "pro")
	h.setPolicy("notify", `{"agent_clients":["test-agent"],"approval_window_seconds":600,
		"rules":[{"name":"agents need a human","caller":"agent","action":"approve"}]}`)
	recv := newHookReceiver(t, 0)
	std := h.addEndpoint("notify", map[string]any{"url": recv.URL + "/std",
		"events": []string{"approval.requested", "approval.granted", "change.executed"}})
	slack := h.addEndpoint("notify", map[string]any{"url": recv.URL + "/slack", "events": []string{"approval.requested"}, "format": "slack"})
	recv.mu.Lock()
	recv.secrets["/std"], recv.secrets["/slack"] = std.Secret, slack.Secret
	recv.mu.Unlock()
	h.runDeliverer()

	agent := h.token("notify", "alice", auth.ScopeRead, auth.ScopeWrite)
	p := h.proposeApproval(agent, "scale")
	m := recv.waitFor("/std", "approval.requested", 10*time.Second)
	data, _ := m.body["data"].(map[string]any)
	want := map[string]any{"confirmation_id": p.ConfirmationID, "summary": p.Summary, "requester": "alice",
		"agent": "test-agent", "approvals_given": 0.0, "approvals_required": 1.0,
		"approval_url": h.env["PUBLIC_BASE_URL"] + "/approvals/" + p.ConfirmationID}
	for k, v := range want {
		if data[k] != v {
			t.Errorf("data.%s = %v, want %v", k, data[k], v)
		}
	}
	if exp, err := time.Parse(time.RFC3339, p.ExpiresAt); err != nil || data["expires_at"] != exp.UTC().Truncate(time.Second).Format(time.RFC3339) {
		t.Errorf("expires_at %v, proposal's %s", data["expires_at"], p.ExpiresAt)
	}
	if m.body["org"] != "notify" || !strings.HasPrefix(m.id, "evt_") || m.body["id"] != m.id {
		t.Errorf("envelope %v (webhook-id %s)", m.body, m.id)
	}
	raw, _ := json.Marshal(m.body)
	if strings.Contains(string(raw), p.ConfirmToken) || strings.Contains(string(raw), "confirm_token") {
		t.Fatalf("a token in a notification: %s", raw)
	}

	// Slack: the summary verbatim (Slack's escapes of &, <, >), who asks
	// through which agent, the countdown and the approval page's button.
	var slackText string
	for deadline := time.Now().Add(10 * time.Second); slackText == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, m := range recv.messages() {
			if m.path == "/slack" {
				b, _ := json.Marshal(m.body)
				slackText = string(b)
			}
		}
	}
	escaped := strings.NewReplacer("&", `\u0026amp;`, "<", `\u0026lt;`, ">", `\u0026gt;`).Replace(p.Summary)
	for _, want := range []string{escaped, "Approval needed", "Asked by *alice* through agent *test-agent*", "Expires",
		"in 9 minutes", h.env["PUBLIC_BASE_URL"] + "/approvals/" + p.ConfirmationID, `"blocks"`} {
		if !strings.Contains(slackText, want) {
			t.Errorf("the Slack message lacks %q: %s", want, slackText)
		}
	}
	r := h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("notify", "boss"), nil)
	wantStatus(t, r, http.StatusOK, "")
	g := recv.waitFor("/std", "approval.granted", 10*time.Second)
	if gd, _ := g.body["data"].(map[string]any); gd["actor"] != "boss" || gd["approvals_given"] != 1.0 {
		t.Errorf("approval.granted data %v", gd)
	}
	wantStatus(t, h.confirm(agent, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	recv.waitFor("/std", "change.executed", 10*time.Second)

	// The receiver has each message before its 200 reaches the deliverer,
	// which then records the outcome and only then counts it: wait for the
	// count of the four deliveries (approval.requested to both endpoints,
	// approval.granted, change.executed). Counted after recorded, all four
	// are in the list below too.
	const delivered = `billingd_webhook_deliveries_total{outcome="delivered"}`
	var metrics string
	waitFor(t, "the four deliveries counted as delivered", func() bool {
		metrics = scrape(t, h.metricsURL)
		return metricValue(metrics, delivered) >= 4
	})
	if !strings.Contains(metrics, "billingd_webhook_outbox_oldest_pending_seconds") {
		t.Fatalf("webhook metrics missing:\n%s", grepLines(metrics, "webhook"))
	}
	// The admin's list shows the deliveries.
	r = h.do("GET", "/api/billing/webhook-endpoints", h.admin("notify", "boss"), nil)
	var list struct {
		Endpoints []webhookEndpoint `json:"webhook_endpoints"`
	}
	r.decode(t, &list)
	if len(list.Endpoints[0].Recent) != 3 || list.Endpoints[0].Recent[0].Status != "delivered" || list.Endpoints[0].Recent[0].Attempts != 1 {
		t.Fatalf("recent deliveries: %s", r.Body)
	}
}

func scrape(t *testing.T, metricsURL string) string {
	t.Helper()
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func metricValue(metrics, series string) float64 {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(l[len(series):]), 64)
			return v
		}
	}
	return -1
}

// TestWebhooksThroughSIGKILL: a billingd serve process is SIGKILLed with
// deliveries in flight and pending; two other replicas then deliver the
// outbox together. Every event still reaches each endpoint (none lost: the
// killed replica's claims end with their lease and are taken again), and
// no event is ever sent to one endpoint twice at the same time.
func TestWebhooksThroughSIGKILL(t *testing.T) {
	// Not parallel: kills a billingd process.
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("WEBHOOK_POLL_INTERVAL", "100ms"),
		withEnv("WEBHOOK_TIMEOUT", "2s"), withEnv("WEBHOOK_RETRY_SCHEDULE", "200ms,200ms,200ms"))
	h.createOrg("crashy", "Crashy", "pro")
	recv := newHookReceiver(t, 300*time.Millisecond)
	paths := []string{"/a", "/b", "/c"}
	for _, p := range paths {
		e := h.addEndpoint("crashy", map[string]any{"url": recv.URL + p, "events": []string{"change.failed"}})
		recv.secrets[p] = e.Secret
	}
	first := h.startServe(freeAddr(t))

	const events = 20
	for i := range events {
		err := h.app.Store.AppendAudit(context.Background(), billing.AuditEvent{Event: billing.EventOperationFailed,
			Org: "crashy", Principal: "alice", Operation: "upgrade_plan", ConfirmationID: "cfm_" + strconv.Itoa(i),
			Outcome: "failed", Reason: "payment_failed"})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Kill the first replica while it has deliveries in flight, then let
	// two others finish.
	deadline := time.Now().Add(20 * time.Second)
	for !recv.inFlight() {
		if time.Now().After(deadline) {
			t.Fatal("deliveries never started")
		}
		time.Sleep(time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	h.startServe(freeAddr(t))
	h.startServe(freeAddr(t))

	deadline = time.Now().Add(60 * time.Second)
	for {
		var pending int
		if err := h.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries still not delivered after the kill", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var retaken int
	if err := h.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_deliveries WHERE attempts > 1`).Scan(&retaken); err != nil {
		t.Fatal(err)
	}
	if retaken == 0 {
		t.Fatal("no delivery was attempted twice: the kill cut no claim short")
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.overlap) > 0 {
		t.Fatalf("sent twice at the same time: %v", recv.overlap)
	}
	ids := map[string]bool{}
	for _, p := range paths {
		n := 0
		for key, count := range recv.done {
			if strings.HasPrefix(key, p+" ") && count > 0 {
				n++
				ids[strings.TrimPrefix(key, p+" ")] = true
			}
		}
		if n != events {
			t.Errorf("%s received %d distinct events, want %d", p, n, events)
		}
	}
	if len(ids) != events {
		t.Errorf("%d distinct event ids, want %d (one per audit event, shared by its endpoints)", len(ids), events)
	}
}

// TestApprovalNotificationsOfTwoApproversAndExpiry: with a rule asking for
// two approvers, the notifications say how many have approved and how many
// are needed, and a change whose approvals are not complete when its window
// ends is delivered as approval.expired (once), with its progress.
func TestApprovalNotificationsOfTwoApproversAndExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("WEBHOOK_POLL_INTERVAL", "100ms"),
		withEnv("CONFIRM_TTL", "2s"), withEnv("SETTLE_INTERVAL", "100ms"))
	h.createOrg("notify2", "Notify Two", "pro")
	h.setPolicy("notify2", `{"rules":[{"name":"two","action":"approve","approvals_required":2}]}`)
	recv := newHookReceiver(t, 0)
	ep := h.addEndpoint("notify2", map[string]any{"url": recv.URL + "/std",
		"events": []string{"approval.requested", "approval.granted", "approval.expired"}})
	recv.mu.Lock()
	recv.secrets["/std"] = ep.Secret
	recv.mu.Unlock()
	h.runDeliverer()

	tok := h.user("notify2", "lou")
	p := h.proposeApproval(tok, "scale")
	progress := func(m hookMessage) (given, needed any) {
		d, _ := m.body["data"].(map[string]any)
		if d["confirmation_id"] != p.ConfirmationID {
			t.Errorf("%s names confirmation %v, want %s", m.body["type"], d["confirmation_id"], p.ConfirmationID)
		}
		return d["approvals_given"], d["approvals_required"]
	}
	// Approve at once: the approval window is CONFIRM_TTL (2 s), which
	// waiting for the first delivery here could spend on a loaded machine.
	// Each notification carries the progress of its own moment.
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve", h.admin("notify2", "boss"), nil),
		http.StatusOK, "")
	if g, n := progress(recv.waitFor("/std", "approval.requested", 10*time.Second)); g != 0.0 || n != 2.0 {
		t.Errorf("approval.requested: %v of %v approved, want 0 of 2", g, n)
	}
	if g, n := progress(recv.waitFor("/std", "approval.granted", 10*time.Second)); g != 1.0 || n != 2.0 {
		t.Errorf("approval.granted: %v of %v approved, want 1 of 2", g, n)
	}
	if g, n := progress(recv.waitFor("/std", "approval.expired", 15*time.Second)); g != 1.0 || n != 2.0 {
		t.Errorf("approval.expired: %v of %v approved, want 1 of 2", g, n)
	}
	time.Sleep(500 * time.Millisecond) // a second expiry notification would have come by now
	expired := 0
	for _, m := range recv.messages() {
		if m.body["type"] == "approval.expired" {
			expired++
		}
	}
	if expired != 1 {
		t.Errorf("%d approval.expired deliveries, want 1", expired)
	}
}

// TestMandateUsedIsDelivered: a change an agent makes under a standing
// mandate (contract §13) reaches the org's endpoints as mandate.used (and
// change.executed), naming the mandate and the change.
func TestMandateUsedIsDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("WEBHOOK_POLL_INTERVAL", "100ms"))
	h.createOrg("mused", "Mandate Used", "pro")
	recv := newHookReceiver(t, 0)
	ep := h.addEndpoint("mused", map[string]any{"url": recv.URL + "/std", "events": []string{"mandate.used", "change.executed"}})
	recv.mu.Lock()
	recv.secrets["/std"] = ep.Secret
	recv.mu.Unlock()
	h.runDeliverer()

	m := h.grantMandate("mused", "alice", generous())
	r, a := h.firstCall(h.user("mused", "alice"), "upgrade", "scale")
	wantStatus(t, r, http.StatusOK, "")
	if a.MandateID != m.ID {
		t.Fatalf("executed under %q, want %s", a.MandateID, m.ID)
	}
	used := recv.waitFor("/std", "mandate.used", 10*time.Second)
	d, _ := used.body["data"].(map[string]any)
	if d["mandate_id"] != m.ID || d["consent_method"] != "mandate" || d["to"] != "scale" || d["requester"] != "alice" {
		t.Errorf("mandate.used data %v", d)
	}
	recv.waitFor("/std", "change.executed", 10*time.Second)
}

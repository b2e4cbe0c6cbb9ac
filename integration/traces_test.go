package integration

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// otlpReceiver is an OTLP/HTTP collector in the test process: it keeps
// every span billingd exports.
type otlpReceiver struct {
	url string

	mu    sync.Mutex
	spans []*tracepb.Span
	// services are the service.name resource attributes seen.
	services map[string]bool
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{services: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "OTLP/HTTP protobuf traces only", http.StatusNotFound)
			return
		}
		body := io.Reader(req.Body)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(data, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *otlpReceiver) add(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range export.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				r.services[kv.Value.GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

// all returns every span received so far.
func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// trace returns the spans of traceID received so far.
func (r *otlpReceiver) trace(traceID string) []*tracepb.Span {
	var spans []*tracepb.Span
	for _, s := range r.all() {
		if hex.EncodeToString(s.TraceId) == traceID {
			spans = append(spans, s)
		}
	}
	return spans
}

// waitTrace waits until traceID's server span and the spans named have
// arrived (the batch exporter sends every OTEL_BSP_SCHEDULE_DELAY) and
// returns the trace's spans. It need not wait longer: the exporter sends
// spans in the order they ended, one export after the other, so the spans
// that ended before these (their children: the steps, the database and
// Stripe round trips) have arrived with them or before.
func (r *otlpReceiver) waitTrace(t *testing.T, traceID string, names ...string) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		spans := r.trace(traceID)
		missing := map[string]bool{}
		for _, name := range names {
			missing[name] = true
		}
		server := false
		for _, s := range spans {
			delete(missing, s.Name)
			server = server || s.Kind == tracepb.Span_SPAN_KIND_SERVER && strings.HasPrefix(s.Name, "POST ")
		}
		if server && len(missing) == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: server span %v, missing %v after 15s (%d spans of it, %d in all)",
				traceID, server, slices.Sorted(maps.Keys(missing)), len(spans), len(r.all()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// traceparent is a caller's W3C traceparent with a new trace id, and the
// trace and parent span ids in it.
func traceparent(t *testing.T) (header, traceID, parentID string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, parentID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + parentID + "-01", traceID, parentID
}

// tracedCall makes a REST call to base with a caller's traceparent.
func tracedCall(t *testing.T, base, path, token, parent string, body any) response {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", base+path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if parent != "" {
		req.Header.Set("traceparent", parent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := readResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyValue(e))
		}
		return strings.Join(parts, ",")
	default:
		return fmt.Sprint(v.GetValue())
	}
}

// spanText is everything a span says: its name, attributes, events and
// status, for the search for secrets.
func spanText(s *tracepb.Span) string {
	var b strings.Builder
	b.WriteString(s.Name + "\n" + s.GetStatus().GetMessage() + "\n")
	kvs := append([]*commonpb.KeyValue(nil), s.Attributes...)
	for _, e := range s.Events {
		b.WriteString(e.Name + "\n")
		kvs = append(kvs, e.Attributes...)
	}
	for _, kv := range kvs {
		b.WriteString(kv.Key + "=" + anyValue(kv.Value) + "\n")
	}
	return b.String()
}

// TestSecondCallIsOneTrace (contract §14): billingd serve with
// OTEL_EXPORTER_OTLP_ENDPOINT exports the second call as one trace under
// the caller's traceparent: its server span, a span per database round
// trip, the Stripe client spans and the money path's step spans, with one
// trace id; the request's log line carries it; and no span carries the
// confirm token, the bearer token, the Stripe key or an SQL parameter.
func TestSecondCallIsOneTrace(t *testing.T) {
	h := newHarness(t)
	recv := startOTLPReceiver(t)
	h.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = recv.url
	h.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
	h.env["OTEL_SERVICE_NAME"] = "billingd-traced"
	addr := freeAddr(t)
	s := h.startServe(addr)
	base := "http://" + addr

	const principal = "traced-principal-7f3a" // a parameter of the audit inserts, in no span
	h.createOrg("traced", "Traced", "pro")
	tok := h.user("traced", principal)
	firstParent, firstTrace, _ := traceparent(t)
	first := tracedCall(t, base, "/api/billing/upgrade", tok, firstParent, map[string]string{"to": "scale"})
	wantStatus(t, first, http.StatusAccepted, "")
	var p proposal
	first.decode(t, &p)

	parent, traceID, parentSpan := traceparent(t)
	second := tracedCall(t, base, "/api/billing/upgrade", tok, parent,
		map[string]string{"to": "scale", "confirm_token": p.ConfirmToken})
	wantStatus(t, second, http.StatusOK, "")

	spans := recv.waitTrace(t, traceID)
	t.Logf("the second call's trace:\n%s", spanTree(spans))
	var server *tracepb.Span
	kinds := map[string]int{}
	steps := map[string]bool{}
	for _, sp := range spans {
		switch {
		case sp.Kind == tracepb.Span_SPAN_KIND_SERVER:
			server = sp
		case attr(sp, "db.system.name") == "postgresql":
			kinds["database"]++
		case sp.Kind == tracepb.Span_SPAN_KIND_CLIENT && strings.HasPrefix(sp.Name, "stripe "):
			kinds["stripe"]++
		case attr(sp, "billingd.step") != "":
			steps[sp.Name] = true
			if sp.Name == "second_call/send" && attr(sp, "billingd.confirmation_id") == "" {
				t.Errorf("step %s names no confirmation", sp.Name)
			}
		}
	}
	if server == nil || server.Name != "POST /api/billing/upgrade" || hex.EncodeToString(server.ParentSpanId) != parentSpan {
		t.Fatalf("server span %v: want POST /api/billing/upgrade under the caller's span %s", server, parentSpan)
	}
	if attr(server, "http.route") != "/api/billing/upgrade" || attr(server, "http.response.status_code") != "200" {
		t.Errorf("server span attributes: %v", server.Attributes)
	}
	if kinds["database"] < 3 || kinds["stripe"] < 2 {
		t.Errorf("the trace has %d database and %d Stripe spans: want round trips of both", kinds["database"], kinds["stripe"])
	}
	for _, want := range []string{"second_call/consume", "second_call/check_at_provider", "second_call/recovery_point",
		"second_call/send", "second_call/record", "second_call/commit"} {
		if !steps[want] {
			t.Errorf("no %s step span (have %v)", want, steps)
		}
	}
	if !recv.services["billingd-traced"] {
		t.Errorf("service names %v: OTEL_SERVICE_NAME not honoured", recv.services)
	}
	if len(recv.trace(firstTrace)) == 0 {
		t.Error("the first call was not traced")
	}

	// Nothing secret, in any span billingd sent (both calls, the settler's
	// rounds).
	secrets := map[string]string{"confirm token": p.ConfirmToken, "token prefix": "pbc_", "bearer token": tok,
		"Stripe key": h.env["STRIPE_SECRET_KEY"], "SQL parameter (principal)": principal}
	for _, sp := range recv.all() {
		text := spanText(sp)
		for what, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("span %q carries the %s:\n%s", sp.Name, what, text)
			}
		}
		if strings.Contains(text, "pgx.query.parameters") || strings.Contains(strings.ToLower(text), "authorization") {
			t.Errorf("span %q records parameters or a header:\n%s", sp.Name, text)
		}
	}

	// The request's log line carries its trace id. It comes through the
	// process's stderr, which a goroutine of this one copies when it gets to
	// it: wait for the line.
	waitFor(t, "a request log line with trace_id="+traceID, func() bool {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if strings.Contains(line, "msg=request ") && strings.Contains(line, "trace_id="+traceID) {
				return true
			}
		}
		return false
	})
}

// TestNoTracesWhenUnset: without an OTLP endpoint, or with the SDK
// disabled, billingd serve exports nothing and logs no trace id, even for
// a caller that sends a traceparent. (Unset, there is nowhere it could
// send; disabled, the receiver is the endpoint it was given.)
func TestNoTracesWhenUnset(t *testing.T) {
	h := newHarness(t)
	recv := startOTLPReceiver(t)
	for name, vars := range map[string]map[string]string{
		"unset":    {},
		"disabled": {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": recv.url + "/v1/traces"},
	} {
		t.Run(name, func(t *testing.T) {
			served := *h
			served.env = map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "50"}
			for k, v := range h.env {
				served.env[k] = v
			}
			for k, v := range vars {
				served.env[k] = v
			}
			addr := freeAddr(t)
			s := served.startServe(addr)
			org := "untraced-" + name
			h.createOrg(org, "Untraced", "pro")
			parent, _, _ := traceparent(t)
			first := tracedCall(t, "http://"+addr, "/api/billing/upgrade", h.user(org, "someone"), parent,
				map[string]string{"to": "scale"})
			wantStatus(t, first, http.StatusAccepted, "")
			time.Sleep(500 * time.Millisecond)
			if n := len(recv.all()); n != 0 {
				t.Fatalf("%d spans exported", n)
			}
			if !strings.Contains(s.logs.String(), "msg=request ") || strings.Contains(s.logs.String(), "trace_id=") {
				t.Fatalf("want request lines without trace ids:\n%s", s.logs.String())
			}
		})
	}
}

// tracedBearer is bearer with the caller's traceparent of the moment.
type tracedBearer struct {
	token  string
	parent *atomic.Value // string
}

func (b tracedBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if p, _ := b.parent.Load().(string); p != "" {
		r.Header.Set("traceparent", p)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPCallIsOneTrace (contract §14): an MCP second call is one trace
// too, on both protocol generations (the SDK runs a 2025-11-25 session's
// tools on the session's context, not the request's): the HTTP server span
// under the caller's, the MCP span "tools/call upgrade_plan" under it with
// mcp.method.name and gen_ai.tool.name, and the steps, database round
// trips and Stripe requests in the same trace; the token, an argument of
// the call, in none.
func TestMCPCallIsOneTrace(t *testing.T) {
	h := newHarness(t)
	recv := startOTLPReceiver(t)
	h.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = recv.url
	h.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
	addr := freeAddr(t)
	h.startServe(addr)
	for _, version := range []string{protocol20251125, protocol20260728} {
		t.Run(version, func(t *testing.T) {
			org := "mcp-traced-" + strings.ReplaceAll(version, "-", "")
			h.createOrg(org, "MCP Traced", "pro")
			tok := h.mcpToken(org, "alice", "claude-desktop", auth.ScopeRead, auth.ScopeWrite)
			parent := &atomic.Value{}
			cs, err := mcpDialVia("http://"+addr, tracedBearer{tok, parent}, version, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			var p proposal
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)

			header, traceID, callerSpan := traceparent(t)
			parent.Store(header)
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), nil)
			parent.Store("")

			spans := recv.waitTrace(t, traceID, "POST /mcp", "tools/call upgrade_plan")
			t.Logf("the MCP second call's trace:\n%s", spanTree(spans))
			byName := map[string]*tracepb.Span{}
			var db, stripe int
			for _, sp := range spans {
				byName[sp.Name] = sp
				if attr(sp, "db.system.name") == "postgresql" {
					db++
				}
				if strings.HasPrefix(sp.Name, "stripe ") {
					stripe++
				}
			}
			server, call := byName["POST /mcp"], byName["tools/call upgrade_plan"]
			if server == nil || hex.EncodeToString(server.ParentSpanId) != callerSpan {
				t.Fatalf("no POST /mcp span under the caller's span %s", callerSpan)
			}
			if call == nil || !bytes.Equal(call.ParentSpanId, server.SpanId) || call.Kind != tracepb.Span_SPAN_KIND_SERVER ||
				attr(call, "mcp.method.name") != "tools/call" || attr(call, "gen_ai.tool.name") != "upgrade_plan" {
				t.Fatalf("MCP span %v: want tools/call upgrade_plan under POST /mcp with the MCP attributes", call)
			}
			if send := byName["second_call/send"]; send == nil || !bytes.Equal(send.ParentSpanId, call.SpanId) {
				t.Fatalf("second_call/send is not under the MCP span")
			}
			if db < 3 || stripe < 2 {
				t.Fatalf("%d database and %d Stripe spans in the trace", db, stripe)
			}
			for _, sp := range recv.all() {
				if text := spanText(sp); strings.Contains(text, p.ConfirmToken) || strings.Contains(text, tok) {
					t.Fatalf("span %q carries a token:\n%s", sp.Name, text)
				}
			}
		})
	}
}

// spanTree draws spans as the indented tree a trace viewer shows, with each
// span's offset from the trace's start and its duration.
func spanTree(spans []*tracepb.Span) string {
	children := map[string][]*tracepb.Span{}
	ids := map[string]bool{}
	var start uint64
	for _, s := range spans {
		ids[hex.EncodeToString(s.SpanId)] = true
		if start == 0 || s.StartTimeUnixNano < start {
			start = s.StartTimeUnixNano
		}
	}
	for _, s := range spans {
		parent := hex.EncodeToString(s.ParentSpanId)
		if !ids[parent] {
			parent = ""
		}
		children[parent] = append(children[parent], s)
	}
	var b strings.Builder
	var draw func(parent string, depth int)
	draw = func(parent string, depth int) {
		kids := children[parent]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTimeUnixNano < kids[j].StartTimeUnixNano })
		for _, s := range kids {
			fmt.Fprintf(&b, "%s%s  +%.1fms %.1fms\n", strings.Repeat("  ", depth), s.Name,
				float64(s.StartTimeUnixNano-start)/1e6, float64(s.EndTimeUnixNano-s.StartTimeUnixNano)/1e6)
			draw(hex.EncodeToString(s.SpanId), depth+1)
		}
	}
	draw("", 0)
	return b.String()
}

// TestSettlerIsATraceOfItsOwn (contract §14): a change whose Stripe answer
// was a 500 is settled by the settler in a trace of its own, not the second
// call's; its step spans name the confirmation (billingd.confirmation_id),
// which leads back to the second call's trace, and its Stripe resend and
// database round trips are in it.
func TestSettlerIsATraceOfItsOwn(t *testing.T) {
	// Only the traced billingd serve settles: the harness's own replica
	// waits an hour.
	h := newHarness(t, withEnv("SETTLE_INTERVAL", "1h"))
	recv := startOTLPReceiver(t)
	h.env["SETTLE_INTERVAL"] = "300ms"
	h.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = recv.url
	h.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
	addr := freeAddr(t)
	h.startServe(addr)
	acct := h.createOrg("settled-traced", "Settled", "pro")
	tok := h.user("settled-traced", "pat")
	first := tracedCall(t, "http://"+addr, "/api/billing/upgrade", tok, "", map[string]string{"to": "scale"})
	wantStatus(t, first, http.StatusAccepted, "")
	var p proposal
	first.decode(t, &p)
	h.fake.FailNext(stripepaytest.ServerError)
	parent, secondTrace, _ := traceparent(t)
	second := tracedCall(t, "http://"+addr, "/api/billing/upgrade", tok, parent,
		map[string]string{"to": "scale", "confirm_token": p.ConfirmToken})
	wantStatus(t, second, http.StatusServiceUnavailable, "upstream_unavailable")
	h.eventually(10*time.Second, "the settler executes the change", func() bool { return h.fake.UpdateCount(acct.Subscription.StripeSubscriptionID) == 1 })

	var round []*tracepb.Span
	h.eventually(10*time.Second, "the settler's round is exported, its root included", func() bool {
		for _, sp := range recv.all() {
			if sp.Name == "settle/resend" && attr(sp, "billingd.confirmation_id") == p.ConfirmationID {
				// The round's own span ends after its children, and may
				// come in a later export than theirs.
				round = recv.trace(hex.EncodeToString(sp.TraceId))
				return slices.ContainsFunc(round, func(sp *tracepb.Span) bool { return len(sp.ParentSpanId) == 0 })
			}
		}
		return false
	})
	t.Logf("the settler's trace:\n%s", spanTree(round))
	var root *tracepb.Span
	var stripePosts, db int
	for _, sp := range round {
		switch {
		case len(sp.ParentSpanId) == 0:
			root = sp
		case sp.Name == "stripe POST":
			stripePosts++
		case attr(sp, "db.system.name") == "postgresql":
			db++
		}
	}
	if root == nil || root.Name != "settle unknown outcomes" || hex.EncodeToString(root.TraceId) == secondTrace {
		t.Fatalf("settler's root span %v: want a trace of its own", root)
	}
	if stripePosts == 0 || db == 0 {
		t.Fatalf("the settler's trace has %d Stripe requests and %d database spans", stripePosts, db)
	}
	var sendInSecond bool
	for _, sp := range recv.trace(secondTrace) {
		if sp.Name == "second_call/send" && attr(sp, "billingd.confirmation_id") == p.ConfirmationID {
			sendInSecond = true
		}
	}
	if !sendInSecond {
		t.Fatal("the second call's trace has no send step naming the same confirmation")
	}
}

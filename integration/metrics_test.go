package integration

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsMoveAfterHandshake: a proposal, its execution, a replay of the
// used token and a cancel move the request, handshake and Stripe series by
// exactly what happened, labelled by route template, never by raw path.
func TestMetricsMoveAfterHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("met", "Metrics", "pro")
	tok := h.user("met", "mia")
	before := h.scrape()

	p := h.propose(tok, "upgrade", "scale")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	wantStatus(t, h.confirm(tok, "upgrade", "pro", p.ConfirmToken), http.StatusConflict, "consent_token_invalid")
	down := h.propose(tok, "downgrade", "pro")
	wantStatus(t, h.do("POST", "/api/billing/confirmations/"+down.ConfirmationID+"/cancel", tok, nil), http.StatusOK, "")

	after := h.scrape()
	for _, c := range []struct {
		series string
		delta  float64
	}{
		{`billingd_http_requests_total{method="POST",route="/api/billing/upgrade",status="202"}`, 1},
		{`billingd_http_requests_total{method="POST",route="/api/billing/upgrade",status="200"}`, 1},
		{`billingd_http_requests_total{method="POST",route="/api/billing/upgrade",status="409"}`, 1},
		{`billingd_http_requests_total{method="POST",route="/api/billing/confirmations/:id/cancel",status="200"}`, 1},
		{`billingd_http_request_duration_seconds_count{method="POST",route="/api/billing/upgrade"}`, 3},
		{`billingd_handshake_calls_total{operation="upgrade_plan",outcome="proposed"}`, 1},
		{`billingd_handshake_calls_total{operation="upgrade_plan",outcome="executed"}`, 1},
		{`billingd_handshake_calls_total{operation="upgrade_plan",outcome="consent_token_invalid"}`, 1},
		{`billingd_handshake_calls_total{operation="downgrade_plan",outcome="proposed"}`, 1},
		{`billingd_stripe_request_duration_seconds_count{call="preview_plan_change",outcome="ok"}`, 2},
		{`billingd_stripe_request_duration_seconds_count{call="apply_plan_change",outcome="ok"}`, 1},
	} {
		if got := after[c.series] - before[c.series]; got != c.delta {
			t.Errorf("%s moved by %v, want %v", c.series, got, c.delta)
		}
	}
	if after["billingd_db_pool_max_conns"] <= 0 || after["billingd_db_pool_acquires_total"] <= before["billingd_db_pool_acquires_total"] {
		t.Errorf("pool statistics missing or still: max %v, acquires %v → %v", after["billingd_db_pool_max_conns"],
			before["billingd_db_pool_acquires_total"], after["billingd_db_pool_acquires_total"])
	}
	for series := range after {
		if strings.Contains(series, "cfm_") || strings.Contains(series, "pbc_") {
			t.Errorf("a series is labelled with an id: %s", series)
		}
	}
}

// TestMetricsMCPHandshake: the plan tools' handshake calls over MCP move
// the same handshake series as the REST API's.
func TestMetricsMCPHandshake(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("mcpmet", "MCP Metrics", "pro")
	cs := mcpConnect(t, h.url, h.mcpUser("mcpmet", "mia"), "")
	before := h.scrape()

	var p proposal
	wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	second := map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}
	wantSuccess(t, callTool(t, cs, "upgrade_plan", second), &executed{})
	wantSuccess(t, callTool(t, cs, "upgrade_plan", second), &executed{}) // replayed
	second["to"] = "pro"
	wantToolError(t, callTool(t, cs, "upgrade_plan", second), "consent_token_invalid")

	after := h.scrape()
	for outcome, delta := range map[string]float64{"proposed": 1, "executed": 1, "replayed": 1, "consent_token_invalid": 1} {
		series := `billingd_handshake_calls_total{operation="upgrade_plan",outcome="` + outcome + `"}`
		if got := after[series] - before[series]; got != delta {
			t.Errorf("%s moved by %v, want %v", series, got, delta)
		}
	}
}

// TestMetricsUnmatchedRoute: requests for paths no route serves share one
// series, so a scanner cannot grow the number of series without bound.
func TestMetricsUnmatchedRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, path := range []string{"/nope", "/api/billing/nope", "/api/billing/confirmations/x/y/z"} {
		wantStatus(t, h.offSpec().do("GET", path, "", nil), http.StatusNotFound, "not_found")
	}
	after := h.scrape()
	if got := after[`billingd_http_requests_total{method="GET",route="unmatched",status="404"}`]; got != 3 {
		t.Errorf("unmatched 404s counted %v times, want 3; series: %v", got, slices.Sorted(maps.Keys(after)))
	}
}

// scrape reads /metrics, on the metrics listener, into series → value:
// counters, gauges, and the _count of histograms, keyed like the
// exposition format.
func (h *harness) scrape() map[string]float64 {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.metricsURL+"/metrics", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	r := h.roundTrip(req)
	wantStatus(h.t, r, http.StatusOK, "")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		h.t.Fatalf("parse /metrics: %v", err)
	}
	series := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				series[seriesName(name, m)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				series[seriesName(name, m)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				series[seriesName(name+"_count", m)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return series
}

func seriesName(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	labels := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	slices.Sort(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

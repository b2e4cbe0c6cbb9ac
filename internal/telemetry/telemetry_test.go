package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/requestid"
)

func TestOutcome(t *testing.T) {
	yes := true
	tests := []struct {
		name string
		res  billing.ChangeResult
		err  error
		want string
	}{
		{"proposal", billing.ChangeResult{ConfirmRequired: &yes, ConfirmToken: "pbc_x"}, nil, "proposed"},
		{"no-op", billing.ChangeResult{OK: true, Noop: true}, nil, "noop"},
		{"executed", billing.ChangeResult{OK: true}, nil, "executed"},
		{"expired", billing.ChangeResult{}, billing.Errorf(billing.CodeTokenExpired, "expired"), "consent_token_expired"},
		{"wrapped", billing.ChangeResult{}, fmt.Errorf("x: %w", billing.Errorf(billing.CodePaymentFailed, "no")), "payment_failed"},
		{"outage", billing.ChangeResult{}, billing.ErrUnavailable, "upstream_unavailable"},
		{"anything else", billing.ChangeResult{}, errors.New("boom"), "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Outcome(tt.res, tt.err); got != tt.want {
				t.Errorf("Outcome = %q, want %q", got, tt.want)
			}
		})
	}
}

// answeringProvider answers every call with err.
type answeringProvider struct{ err error }

func (p answeringProvider) PreviewPlanChange(context.Context, billing.PlanChange) (billing.Preview, error) {
	return billing.Preview{Currency: "usd"}, p.err
}

func (p answeringProvider) ApplyPlanChange(context.Context, billing.PlanChange, string) (billing.AppliedChange, error) {
	return billing.AppliedChange{Status: "active"}, p.err
}

func (p answeringProvider) ReadSubscription(context.Context, string) (billing.ProviderSubscription, error) {
	return billing.ProviderSubscription{}, p.err
}

func (p answeringProvider) SubscriptionInvoices(context.Context, string, time.Time) ([]billing.Invoice, error) {
	return nil, p.err
}

func (p answeringProvider) CreateCustomer(context.Context, billing.NewCustomer, string) (billing.CreatedCustomer, error) {
	return billing.CreatedCustomer{CustomerID: "cus_1"}, p.err
}

// TestObservePayments: each call is timed under its call name and the kind
// of its answer and passes the answer through unchanged; a change is logged
// with the request id and the confirmation id, a request's read only when it
// failed, a background round's read always.
func TestObservePayments(t *testing.T) {
	tests := []struct {
		err     error
		outcome string
	}{
		{nil, "ok"},
		{fmt.Errorf("stripe: %w", billing.ErrPaymentDeclined), "declined"},
		{fmt.Errorf("stripe: %w", billing.ErrProviderRejected), "rejected"},
		{fmt.Errorf("stripe: %w", billing.ErrUnavailable), "unavailable"},
		{context.DeadlineExceeded, "unavailable"},
		{errors.New("odd"), "error"},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			m := New()
			var logs bytes.Buffer
			p := m.ObservePayments(answeringProvider{tt.err}, slog.New(slog.NewJSONHandler(&logs, nil)))
			ctx := requestid.With(context.Background(), "req-1")
			applied, err := p.ApplyPlanChange(ctx, billing.PlanChange{ConfirmationID: "cfm_1"}, "billingd-cfm_1")
			if !errors.Is(err, tt.err) || applied.Status != "active" {
				t.Fatalf("answer changed: %+v, %v", applied, err)
			}
			if _, err := p.PreviewPlanChange(ctx, billing.PlanChange{}); !errors.Is(err, tt.err) {
				t.Fatalf("preview error %v, want %v", err, tt.err)
			}
			if _, err := p.ReadSubscription(ctx, "sub_1"); !errors.Is(err, tt.err) {
				t.Fatalf("read error %v, want %v", err, tt.err)
			}
			if _, err := p.SubscriptionInvoices(ctx, "sub_1", time.Time{}); !errors.Is(err, tt.err) {
				t.Fatalf("list error %v, want %v", err, tt.err)
			}
			if _, err := p.ReadSubscription(context.Background(), "sub_1"); !errors.Is(err, tt.err) { // a background round's
				t.Fatalf("read error %v, want %v", err, tt.err)
			}
			if _, err := p.CreateCustomer(ctx, billing.NewCustomer{OrgID: "org_1"}, "org:org_1"); !errors.Is(err, tt.err) {
				t.Fatalf("create error %v, want %v", err, tt.err)
			}
			// Every call is timed, logged or not.
			for call, want := range map[string]uint64{"apply_plan_change": 1, "preview_plan_change": 1,
				"read_subscription": 2, "list_invoices": 1, "create_customer": 1} {
				if n := sampleCount(t, m, "billingd_stripe_request_duration_seconds", call, tt.outcome); n != want {
					t.Errorf("%s/%s observed %d times, want %d", call, tt.outcome, n, want)
				}
			}
			type logLine struct {
				Call, Outcome  string
				RequestID      string `json:"request_id"`
				ConfirmationID string `json:"confirmation_id"`
			}
			var lines []logLine
			for _, raw := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
				var line logLine
				if err := json.Unmarshal(raw, &line); err != nil {
					t.Fatal(err)
				}
				lines = append(lines, line)
			}
			want := []logLine{{"apply_plan_change", tt.outcome, "req-1", "cfm_1"}}
			if tt.err != nil { // a request's read is logged only when it failed
				want = append(want, logLine{"preview_plan_change", tt.outcome, "req-1", ""},
					logLine{"read_subscription", tt.outcome, "req-1", ""}, logLine{"list_invoices", tt.outcome, "req-1", ""})
			}
			want = append(want, logLine{"read_subscription", tt.outcome, "", ""}, // no request: always
				logLine{"create_customer", tt.outcome, "req-1", ""})
			if !slices.Equal(lines, want) {
				t.Errorf("log lines %+v, want %+v", lines, want)
			}
		})
	}
}

// sampleCount is the number of observations of a histogram with the given
// call and outcome labels.
func sampleCount(t *testing.T, m *Metrics, name, call, outcome string) uint64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, metric := range f.GetMetric() {
			if labels(metric)["call"] == call && labels(metric)["outcome"] == outcome {
				return metric.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

package billing

import (
	"testing"
	"time"
)

// TestMandateCovers: each bound, one at a time, against a change just
// inside it.
func TestMandateCovers(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	base := Mandate{ID: "mdt_x", Org: "o", Principal: "alice", Client: "agent",
		Operations: []Operation{OpUpgrade}, ToPlans: []string{"scale"},
		MaxAmountDueCents: 3000, BudgetCents: 5000, MaxChanges: 2, SpentCents: 2000, Changes: 1,
		ExpiresAt: now.Add(time.Hour)}
	change := mandateFacts{org: "o", principal: "alice", client: "agent", op: OpUpgrade, to: "scale", amountDueCents: 3000}
	revoked := now
	tests := []struct {
		name string
		m    func(*Mandate)
		f    func(*mandateFacts)
		want string
	}{
		{name: "covered"},
		{name: "operation", f: func(f *mandateFacts) { f.op = OpDowngrade }, want: "operation"},
		{name: "plan", f: func(f *mandateFacts) { f.to = "pro" }, want: "plan"},
		{name: "at period end", f: func(f *mandateFacts) { f.atPeriodEnd = true }, want: "at period end"},
		{name: "per change", f: func(f *mandateFacts) { f.amountDueCents = 3001 }, want: "amount"},
		{name: "budget", m: func(m *Mandate) { m.SpentCents = 2001 }, want: "budget"},
		{name: "count", m: func(m *Mandate) { m.Changes = 2 }, want: "changes"},
		{name: "expired", m: func(m *Mandate) { m.ExpiresAt = now }, want: MandateExpired},
		{name: "revoked", m: func(m *Mandate) { m.RevokedAt = &revoked }, want: MandateRevoked},
		{name: "another client", f: func(f *mandateFacts) { f.client = "other" }, want: "another org, person or client"},
		{name: "another person", f: func(f *mandateFacts) { f.principal = "bob" }, want: "another org, person or client"},
		{name: "another org", f: func(f *mandateFacts) { f.org = "p" }, want: "another org, person or client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, f := base, change
			if tt.m != nil {
				tt.m(&m)
			}
			if tt.f != nil {
				tt.f(&f)
			}
			if got := m.covers(f, now); got != tt.want {
				t.Fatalf("covers = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMandateConsent: a change made under a mandate says so, naming it,
// with no person present, whatever the channel claims.
func TestMandateConsent(t *testing.T) {
	k := consentFor(Confirmation{Agent: true}, Caller{mandate: "mdt_x", Agent: true, Consent: ConsentMCPAppView}, true)
	if k.Method != ConsentMandate || k.HumanPresent != HumanNone || k.MandateID != "mdt_x" {
		t.Fatalf("consent %+v", k)
	}
}

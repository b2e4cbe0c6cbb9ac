package billing

import (
	"testing"
	"time"
)

// newRulesService is a Service over catalog with the given skew; the store
// and provider are never called by the rules.
func newRulesService(t *testing.T, plans []Plan, skew time.Duration) *Service {
	t.Helper()
	svc, err := NewService(Config{Store: unusedStore{}, Payments: unusedProvider{},
		Catalog: testCatalog(t, plans), TokenTTL: time.Minute, ClockSkew: skew})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return svc
}

// withPlan returns the default plans with the plan id changed by edit, or
// removed when edit is nil.
func withPlan(id string, edit func(*Plan)) []Plan {
	var plans []Plan
	for _, p := range DefaultPlans() {
		if p.ID == id {
			if edit == nil {
				continue
			}
			edit(&p)
		}
		plans = append(plans, p)
	}
	return plans
}

var (
	rulesIssued  = time.Date(2026, 5, 12, 10, 0, 0, 0, time.UTC)
	rulesExpires = rulesIssued.Add(time.Minute)
)

// pendingUpgrade is a pending pro → scale confirmation made against the
// default catalog and testAccount's subscription.
func pendingUpgrade() Confirmation {
	return Confirmation{
		ID: "cfm_AAAAAAAAAAAAAAAAAAAAAA", Org: "org_vb", Principal: "alice", Operation: OpUpgrade, Status: StatusPending,
		CreatedAt: rulesIssued, ExpiresAt: rulesExpires,
		Terms: Terms{FromPlan: "pro", ToPlan: "scale", FromPriceID: "price_billingd_pro", ToPriceID: "price_billingd_scale",
			FromAmountCents: 1900, ToAmountCents: 4900, Currency: "usd", ProrationDate: rulesIssued,
			SubscriptionVer: 1, AmountDueCents: 1742, NextChargeAt: periodEnd},
	}
}

func TestCheckRedeemable(t *testing.T) {
	upgradeScale := ChangeRequest{Operation: OpUpgrade, To: "scale", ConfirmToken: "pbc_x"}
	type want struct {
		code   Code // "" for redeemable
		reason string
		status Status
	}
	var (
		ok       = want{}
		used     = want{CodeTokenInvalid, "used", ""}
		invalid  = want{CodeTokenInvalid, "invalid", ""}
		expired  = want{CodeTokenExpired, "expired", ""}
		timedOut = want{CodeTokenExpired, "expired", StatusExpired}
		mismatch = want{CodeTokenMismatch, "mismatch", StatusInvalidated}
	)
	tests := []struct {
		name  string
		plans []Plan // nil: the default catalog
		skew  time.Duration
		conf  func(*Confirmation)
		acct  func(*Account)
		req   ChangeRequest
		now   time.Time
		want  want
	}{
		// Status.
		{name: "pending", want: ok},
		{name: "executed", conf: func(c *Confirmation) { c.Status = StatusExecuted }, want: used},
		{name: "failed", conf: func(c *Confirmation) { c.Status = StatusFailed }, want: used},
		{name: "expired status", conf: func(c *Confirmation) { c.Status = StatusExpired }, want: expired},
		{name: "superseded", conf: func(c *Confirmation) { c.Status = StatusSuperseded }, want: invalid},
		{name: "cancelled", conf: func(c *Confirmation) { c.Status = StatusCancelled }, want: invalid},
		{name: "invalidated", conf: func(c *Confirmation) { c.Status = StatusInvalidated }, want: invalid},
		{name: "revoked by drift", conf: func(c *Confirmation) { c.Status = StatusRevoked }, want: want{CodeTokenMismatch, "mismatch", ""}},
		{name: "empty status", conf: func(c *Confirmation) { c.Status = "" }, want: invalid},
		{name: "executed beats mismatch", conf: func(c *Confirmation) { c.Status = StatusExecuted },
			req: ChangeRequest{Operation: OpDowngrade, To: "free"}, want: used},
		{name: "executed beats expiry", conf: func(c *Confirmation) { c.Status = StatusExecuted },
			now: rulesExpires.Add(time.Hour), want: used},

		// Expiry by the database clock passed in, plus the skew.
		{name: "just issued", now: rulesIssued, want: ok},
		{name: "exactly at expires_at", now: rulesExpires, want: ok},
		{name: "1ns after expires_at", now: rulesExpires.Add(time.Nanosecond), want: timedOut},
		{name: "long after expires_at", now: rulesExpires.Add(24 * time.Hour), want: timedOut},
		{name: "skew: 1ns after expires_at", skew: 30 * time.Second, now: rulesExpires.Add(time.Nanosecond), want: ok},
		{name: "skew: exactly at expires_at+skew", skew: 30 * time.Second, now: rulesExpires.Add(30 * time.Second), want: ok},
		{name: "skew: 1ns after expires_at+skew", skew: 30 * time.Second, now: rulesExpires.Add(30*time.Second + time.Nanosecond), want: timedOut},
		{name: "max skew: 1ns after", skew: MaxClockSkew, now: rulesExpires.Add(MaxClockSkew + time.Nanosecond), want: timedOut},
		{name: "expiry beats mismatch", now: rulesExpires.Add(time.Nanosecond),
			req: ChangeRequest{Operation: OpDowngrade, To: "free"}, want: timedOut},
		{name: "expiry in another zone", now: rulesExpires.Add(time.Nanosecond).In(time.FixedZone("X", -7*3600)), want: timedOut},

		// The request must be the one the token was issued for.
		{name: "operation differs", req: ChangeRequest{Operation: OpDowngrade, To: "scale"}, want: mismatch},
		{name: "to differs", req: ChangeRequest{Operation: OpUpgrade, To: "free"}, want: mismatch},
		{name: "to differs in case", req: ChangeRequest{Operation: OpUpgrade, To: "Scale"}, want: mismatch},

		// Everything the summary stated must still hold.
		{name: "subscription version changed", acct: func(a *Account) { a.Subscription.Version = 2 }, want: mismatch},
		{name: "subscription plan changed", acct: func(a *Account) { a.Subscription.Plan = "free" }, want: mismatch},
		{name: "subscription already on target", acct: func(a *Account) { a.Subscription.Plan = "scale" }, want: mismatch},
		{name: "to price id changed", plans: withPlan("scale", func(p *Plan) { p.StripePriceID = "price_scale_2027" }), want: mismatch},
		{name: "to amount changed", plans: withPlan("scale", func(p *Plan) { p.AmountCents = 5900 }), want: mismatch},
		{name: "from price id changed", plans: withPlan("pro", func(p *Plan) { p.StripePriceID = "price_pro_2027" }), want: mismatch},
		{name: "from amount changed", plans: withPlan("pro", func(p *Plan) { p.AmountCents = 2900 }), want: mismatch},
		{name: "to plan removed", plans: withPlan("scale", nil), want: mismatch},
		{name: "from plan removed", plans: withPlan("pro", nil), want: mismatch},
		{name: "currency changed", plans: func() []Plan {
			plans := DefaultPlans()
			for i := range plans {
				plans[i].Currency = "eur"
			}
			return plans
		}(), want: mismatch},
		{name: "unrelated plan changed", plans: withPlan("free", func(p *Plan) { p.StripePriceID = "price_free_2027" }), want: ok},
		{name: "names are not terms", plans: withPlan("scale", func(p *Plan) { p.Name = "Scale+" }), want: ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := tt.plans
			if plans == nil {
				plans = DefaultPlans()
			}
			svc := newRulesService(t, plans, tt.skew)
			c := pendingUpgrade()
			if tt.conf != nil {
				tt.conf(&c)
			}
			acct := testAccount()
			if tt.acct != nil {
				tt.acct(&acct)
			}
			req := upgradeScale
			if tt.req.Operation != "" {
				req = tt.req
			}
			now := tt.now
			if now.IsZero() {
				now = rulesIssued.Add(10 * time.Second)
			}

			r := svc.checkRedeemable(c, acct, req, now)
			if tt.want.code == "" {
				if r != nil {
					t.Fatalf("rejected: %v (reason %q, status %q), want redeemable", r.err, r.reason, r.status)
				}
				return
			}
			if r == nil {
				t.Fatalf("redeemable, want %s", tt.want.code)
			}
			if r.err == nil || r.err.Code != tt.want.code {
				t.Errorf("err = %v, want code %s", r.err, tt.want.code)
			}
			if r.err != nil && (r.err.Message == "" || r.err.Err != nil) {
				t.Errorf("err %+v: want a public message and no private cause", r.err)
			}
			if r.reason != tt.want.reason {
				t.Errorf("reason = %q, want %q", r.reason, tt.want.reason)
			}
			if r.status != tt.want.status {
				t.Errorf("new status = %q, want %q", r.status, tt.want.status)
			}
		})
	}
}

func TestPlanChange(t *testing.T) {
	tests := []struct {
		name     string
		current  string
		op       Operation
		to       string
		wantCode Code // "" for no error
		wantFrom string
		wantTo   string
	}{
		{name: "upgrade to higher", current: "pro", op: OpUpgrade, to: "scale", wantFrom: "pro", wantTo: "scale"},
		{name: "upgrade two steps", current: "free", op: OpUpgrade, to: "scale", wantFrom: "free", wantTo: "scale"},
		{name: "downgrade to lower", current: "pro", op: OpDowngrade, to: "free", wantFrom: "pro", wantTo: "free"},
		{name: "downgrade two steps", current: "scale", op: OpDowngrade, to: "free", wantFrom: "scale", wantTo: "free"},
		{name: "upgrade to lower", current: "pro", op: OpUpgrade, to: "free", wantCode: CodeInvalidPlanChange},
		{name: "upgrade from top", current: "scale", op: OpUpgrade, to: "pro", wantCode: CodeInvalidPlanChange},
		{name: "downgrade to higher", current: "pro", op: OpDowngrade, to: "scale", wantCode: CodeInvalidPlanChange},
		{name: "downgrade from bottom", current: "free", op: OpDowngrade, to: "pro", wantCode: CodeInvalidPlanChange},
		{name: "unknown plan", current: "pro", op: OpUpgrade, to: "enterprise", wantCode: CodeUnknownPlan},
		{name: "unknown plan on downgrade", current: "pro", op: OpDowngrade, to: "hobby", wantCode: CodeUnknownPlan},
		{name: "same plan upgrade", current: "pro", op: OpUpgrade, to: "pro", wantFrom: "pro", wantTo: "pro"},
		{name: "same plan downgrade", current: "scale", op: OpDowngrade, to: "scale", wantFrom: "scale", wantTo: "scale"},
		{name: "subscription on unknown plan", current: "legacy", op: OpUpgrade, to: "scale", wantCode: CodeInternal},
	}
	svc := newRulesService(t, DefaultPlans(), 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := Subscription{Org: "org_vb", Plan: tt.current}
			op, _ := operationOf(tt.op)
			from, w, err := svc.target(op, sub, ChangeRequest{Operation: tt.op, To: tt.to}, time.Now())
			to := w.to
			wantCode(t, err, tt.wantCode)
			if tt.wantCode != "" {
				if from != (Plan{}) || to != (Plan{}) {
					t.Errorf("plans returned with an error: %+v %+v", from, to)
				}
				return
			}
			if from.ID != tt.wantFrom || to.ID != tt.wantTo {
				t.Errorf("from, to = %s, %s; want %s, %s", from.ID, to.ID, tt.wantFrom, tt.wantTo)
			}
		})
	}
}

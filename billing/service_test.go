package billing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// ---- fixture --------------------------------------------------------------------
//
// The handshake's tests are in the external test package so that they can
// use billingtest's fakes (billingtest imports billing); they see billing as
// its callers do, plus the few token helpers export_test.go exposes.

var (
	// dbNow is the fake database's clock; the fraction checks that the
	// proration date is cut to whole seconds.
	dbNow     = time.Date(2026, 5, 12, 10, 0, 0, 500_000_000, time.UTC)
	periodEnd = time.Date(2026, 5, 30, 0, 0, 0, 0, time.UTC)
	alice     = billing.Caller{Org: "org_vb", Principal: "alice", Client: "agent-1", RequestID: "req-1"}
)

const upgradeSummary = "Upgrade Vector Build from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $17.42 due now; first full Scale charge on May 30, 2026."

func testAccount() billing.Account {
	return billing.Account{
		Org: billing.Org{ID: "org_vb", Name: "Vector Build", StripeCustomerID: "cus_1"},
		Subscription: billing.Subscription{Org: "org_vb", StripeSubscriptionID: "sub_1", StripeItemID: "si_1",
			Plan: "pro", Status: "active", CurrentPeriodEnd: periodEnd, Version: 1},
	}
}

func testCatalog(t *testing.T, plans []billing.Plan) billing.Catalog {
	t.Helper()
	c, err := billing.NewCatalog(plans)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
}

type handshakeFixture struct {
	svc      *billing.Service
	store    *billingtest.Store
	provider *billingtest.Provider
}

func newHandshakeFixture(t *testing.T) handshakeFixture {
	t.Helper()
	store := billingtest.NewStore(dbNow, testAccount())
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"}, PeriodEnd: periodEnd,
		ReadState: billingtest.StateOf(testAccount()), Clock: func() time.Time { return dbNow }}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()), TokenTTL: time.Minute,
		Livemode: true})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return handshakeFixture{svc: svc, store: store, provider: provider}
}

// propose makes a first call that must succeed with a token.
func (f handshakeFixture) propose(t *testing.T, caller billing.Caller, op billing.Operation, to string) billing.ChangeResult {
	t.Helper()
	res, err := f.svc.ChangePlan(context.Background(), caller, billing.ChangeRequest{Operation: op, To: to})
	if err != nil {
		t.Fatalf("first call %s %s: %v", op, to, err)
	}
	if !res.Proposed() {
		t.Fatalf("first call %s %s: no token in %+v", op, to, res)
	}
	return res
}

func (f handshakeFixture) confirm(caller billing.Caller, op billing.Operation, to, token string) (billing.ChangeResult, error) {
	return f.svc.ChangePlan(context.Background(), caller, billing.ChangeRequest{Operation: op, To: to, ConfirmToken: token})
}

func (f handshakeFixture) confirmation(t *testing.T, id string) billing.Confirmation {
	t.Helper()
	c, ok := f.store.Snapshot().Confirmations[id]
	if !ok {
		t.Fatalf("confirmation %s not stored", id)
	}
	return c
}

func (f handshakeFixture) subscription() billing.Subscription {
	return f.store.Snapshot().Accounts["org_vb"].Subscription
}

// wantCode is the internal tests' helper (helpers_test.go).
var wantCode = billing.WantCode

// wantPublicMessageClean checks that the client's message echoes none of the
// given private strings.
func wantPublicMessageClean(t *testing.T, err error, private ...string) {
	t.Helper()
	msg := billing.PublicMessage(err)
	if msg == "" {
		t.Error("PublicMessage is empty")
	}
	for _, p := range private {
		if strings.Contains(msg, p) {
			t.Errorf("PublicMessage %q contains private text %q", msg, p)
		}
	}
}

func eventsOf(st billingtest.State) []string {
	var names []string
	for _, e := range st.Audit {
		names = append(names, e.Event)
	}
	return names
}

func lastEvent(t *testing.T, st billingtest.State) billing.AuditEvent {
	t.Helper()
	if len(st.Audit) == 0 {
		t.Fatal("no audit events")
	}
	return st.Audit[len(st.Audit)-1]
}

// ---- tests --------------------------------------------------------------------

func TestMemStoreInTxRollsBack(t *testing.T) {
	store := billingtest.NewStore(dbNow, testAccount())
	store.Update(func(st *billingtest.State) {
		st.Confirmations["cfm_x"] = billing.Confirmation{ID: "cfm_x", Org: "org_vb", Status: billing.StatusPending}
	})
	boom := errors.New("boom")
	sub := testAccount().Subscription
	sub.Plan = "scale"
	err := store.InTx(context.Background(), func(tx billing.Tx) error {
		if err := tx.Record(context.Background(), billing.Record{ConfirmationID: "cfm_x", Status: billing.StatusExecuted, Subscription: &sub,
			Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: "org_vb"}}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want boom", err)
	}
	st := store.Snapshot()
	if got := st.Confirmations["cfm_x"].Status; got != billing.StatusPending {
		t.Errorf("status after rollback = %s, want pending", got)
	}
	if got := st.Accounts["org_vb"].Subscription; got.Plan != "pro" || got.Version != 1 {
		t.Errorf("subscription after rollback = %+v, want pro v1", got)
	}
	if len(st.Audit) != 0 {
		t.Errorf("audit after rollback = %v, want none", eventsOf(st))
	}

	if err := store.InTx(context.Background(), func(tx billing.Tx) error {
		return tx.Record(context.Background(), billing.Record{ConfirmationID: "cfm_x", Status: billing.StatusExecuted, Subscription: &sub})
	}); err != nil {
		t.Fatal(err)
	}
	st = store.Snapshot()
	if st.Confirmations["cfm_x"].Status != billing.StatusExecuted || st.Accounts["org_vb"].Subscription.Version != 2 {
		t.Errorf("commit not applied: %+v", st)
	}
}

func TestChangePlanProposeUpgrade(t *testing.T) {
	f := newHandshakeFixture(t)
	res := f.propose(t, alice, billing.OpUpgrade, "scale")

	if res.ConfirmRequired == nil || !*res.ConfirmRequired || res.OK || res.Noop {
		t.Errorf("flags: confirm_required=%v ok=%v noop=%v, want true/false/false", res.ConfirmRequired, res.OK, res.Noop)
	}
	if !strings.HasPrefix(res.ConfirmToken, billing.TokenPrefix) || !billing.WellFormedToken(res.ConfirmToken) {
		t.Errorf("token %q is not well formed", res.ConfirmToken)
	}
	if !billing.WellFormedConfirmationID(res.ConfirmationID) {
		t.Errorf("confirmation id %q is not well formed", res.ConfirmationID)
	}
	if res.Operation != billing.OpUpgrade {
		t.Errorf("operation = %s", res.Operation)
	}
	if res.Summary != upgradeSummary {
		t.Errorf("summary =\n  %q\nwant\n  %q", res.Summary, upgradeSummary)
	}
	wantDetails := billing.Details{Danger: billing.DangerCharges, From: "pro", To: "scale", QuantityFrom: 1, QuantityTo: 1, AmountDueNowCents: 1742, SubtotalCents: 1742, Currency: "usd",
		CurrencyDigits: billing.CurrencyDigits{Exponent: 2},
		EffectiveAt:    dbNow.Truncate(time.Second), NextChargeAt: periodEnd, Livemode: true}
	if res.Details == nil || *res.Details != wantDetails {
		t.Errorf("details = %+v, want %+v", res.Details, wantDetails)
	}
	if res.TTLSeconds != 60 {
		t.Errorf("ttl_seconds = %d, want 60", res.TTLSeconds)
	}
	if res.ExpiresAt == nil || !res.ExpiresAt.Equal(dbNow.Add(time.Minute)) {
		t.Errorf("expires_at = %v, want %v", res.ExpiresAt, dbNow.Add(time.Minute))
	}
	if res.Subscription != nil {
		t.Errorf("a proposal carries no subscription: %+v", res.Subscription)
	}

	// The preview asked for exactly the change the confirmation will execute.
	wantChange := billing.PlanChange{CustomerID: "cus_1", SubscriptionID: "sub_1", ItemID: "si_1", FromPriceID: "price_billingd_pro", NewPriceID: "price_billingd_scale",
		FromQuantity: 1, Quantity: 1, ProrationDate: dbNow.Truncate(time.Second), ChargeNow: true}
	if len(f.provider.Previews()) != 1 || f.provider.Previews()[0] != wantChange {
		t.Errorf("previews = %+v, want [%+v]", f.provider.Previews(), wantChange)
	}
	if len(f.provider.ApplyCalls()) != 0 {
		t.Error("the first call executed a change")
	}

	c := f.confirmation(t, res.ConfirmationID)
	if c.Status != billing.StatusPending || !bytes.Equal(c.TokenHash, billing.HashToken(res.ConfirmToken)) {
		t.Errorf("stored confirmation: status %s, hash matches token: %v", c.Status, bytes.Equal(c.TokenHash, billing.HashToken(res.ConfirmToken)))
	}
	if strings.Contains(fmt.Sprintf("%+v", c), res.ConfirmToken) {
		t.Error("the stored confirmation contains the token itself")
	}
	if c.Org != alice.Org || c.Principal != alice.Principal || c.Client != alice.Client || c.Operation != billing.OpUpgrade {
		t.Errorf("confirmation not bound to caller and operation: %+v", c)
	}
	wantTerms := billing.Terms{FromPlan: "pro", ToPlan: "scale", FromPriceID: "price_billingd_pro", ToPriceID: "price_billingd_scale",
		FromAmountCents: 1900, ToAmountCents: 4900, Quantity: 1, Currency: "usd", ProrationDate: dbNow.Truncate(time.Second),
		SubscriptionVer: 1, AmountDueCents: 1742, SubtotalCents: 1742, NextChargeAt: periodEnd, Livemode: true, FromStatus: "active"}
	if c.Terms != wantTerms {
		t.Errorf("terms = %+v, want %+v", c.Terms, wantTerms)
	}
	if got := eventsOf(f.store.Snapshot()); !slices.Equal(got, []string{billing.EventTokenIssued}) {
		t.Errorf("audit = %v, want [TOKEN_ISSUED]", got)
	}
}

func TestChangePlanProposeDowngradeCredit(t *testing.T) {
	f := newHandshakeFixture(t)
	f.provider.Preview = billing.Preview{ProrationCents: -1140, Currency: "usd"}
	res := f.propose(t, alice, billing.OpDowngrade, "free")
	want := "Downgrade Vector Build from Pro ($19/mo) to Free ($0/mo). Nothing is charged now; a pro-rated credit of $11.40 goes to the next invoice; no charges from May 30, 2026."
	if res.Summary != want {
		t.Errorf("summary =\n  %q\nwant\n  %q", res.Summary, want)
	}
	if res.Details.AmountDueNowCents != 0 || res.Details.CreditCents != 1140 {
		t.Errorf("details = %+v, want due 0 credit 1140", *res.Details)
	}
	if f.provider.Previews()[0].ChargeNow {
		t.Error("a downgrade preview must not charge now")
	}
}

func TestChangePlanNoop(t *testing.T) {
	for _, op := range []billing.Operation{billing.OpUpgrade, billing.OpDowngrade} {
		t.Run(string(op), func(t *testing.T) {
			f := newHandshakeFixture(t)
			res, err := f.svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: op, To: "pro"})
			wantCode(t, err, "")
			if !res.OK || !res.Noop || res.ConfirmRequired == nil || *res.ConfirmRequired || res.ConfirmToken != "" {
				t.Errorf("result = %+v, want ok noop confirm_required=false without token", res)
			}
			if res.Subscription == nil || res.Subscription.Plan != "pro" {
				t.Errorf("subscription = %+v, want plan pro", res.Subscription)
			}
			st := f.store.Snapshot()
			if len(st.Confirmations) != 0 || len(f.provider.Previews()) != 0 {
				t.Errorf("a no-op issued a confirmation (%d) or asked for a preview (%d)", len(st.Confirmations), len(f.provider.Previews()))
			}
		})
	}
}

func TestChangePlanConfirmExecutesOnce(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")

	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription == nil || res.Subscription.Plan != "scale" || res.Subscription.Status != "active" ||
		!res.Subscription.CurrentPeriodEnd.Equal(periodEnd) {
		t.Fatalf("result = %+v / %+v, want ok on scale", res, res.Subscription)
	}
	if res.ConfirmToken != "" || res.Noop {
		t.Errorf("an executed change carries no token and is no no-op: %+v", res)
	}
	calls := f.provider.ApplyCalls()
	if len(calls) != 1 {
		t.Fatalf("provider calls = %d, want 1", len(calls))
	}
	if calls[0].Key != "billingd-"+p.ConfirmationID {
		t.Errorf("idempotency key = %q, want derived from %s", calls[0].Key, p.ConfirmationID)
	}
	// The executed change is the previewed one, naming its confirmation.
	previewed := f.provider.Previews()[0]
	previewed.ConfirmationID = p.ConfirmationID
	if calls[0].Change != previewed {
		t.Errorf("executed change %+v differs from the previewed %+v", calls[0].Change, previewed)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted {
		t.Errorf("status = %s, want executed", c.Status)
	}
	if sub := f.subscription(); sub.Plan != "scale" || sub.Version != 2 || sub.StripeItemID != "si_1" {
		t.Errorf("stored subscription = %+v, want scale v2 si_1 (a price swap keeps the item)", sub)
	}
	st := f.store.Snapshot()
	if got, want := eventsOf(st), []string{billing.EventTokenIssued, billing.EventTokenValidated, billing.EventOperationExecuted}; !slices.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}

	// The owner repeats the call: the original answer, replayed.
	replay, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !replay.Replayed || !replay.OK || replay.Subscription.Plan != "scale" {
		t.Errorf("replay = %+v, want the original result with replayed", replay)
	}
	if n := len(f.provider.ApplyCalls()); n != 1 {
		t.Errorf("provider calls after a replay = %d, want 1", n)
	}
	// Other parameters with the spent token: used.
	_, err = f.confirm(alice, billing.OpUpgrade, "pro", p.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
	if e := lastEvent(t, f.store.Snapshot()); e.Event != billing.EventTokenRejected || e.Reason != "used" || e.ConfirmationID != p.ConfirmationID {
		t.Errorf("reuse audited as %+v, want TOKEN_REJECTED used", e)
	}
}

func TestChangePlanConfirmProviderRefuses(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode billing.Code
	}{
		{"declined", fmt.Errorf("stripe: card_declined: secret-detail-42 (req_abc): %w", billing.ErrPaymentDeclined), billing.CodePaymentFailed},
		{"rejected", fmt.Errorf("stripe: resource_missing: secret-detail-42 (req_abc): %w", billing.ErrProviderRejected), billing.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, billing.OpUpgrade, "scale")
			f.provider.ApplyErrs = []error{tt.err}

			_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, tt.wantCode)
			wantPublicMessageClean(t, err, "secret-detail-42", "card_declined", "resource_missing", "req_abc", "stripe")
			if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusFailed {
				t.Errorf("status = %s, want failed", c.Status)
			}
			if sub := f.subscription(); sub.Plan != "pro" || sub.Version != 1 {
				t.Errorf("subscription = %+v, want unchanged", sub)
			}
			st := f.store.Snapshot()
			if got, want := eventsOf(st), []string{billing.EventTokenIssued, billing.EventTokenValidated, billing.EventOperationFailed}; !slices.Equal(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			if e := lastEvent(t, st); e.Reason != string(tt.wantCode) || e.Outcome != "failed" {
				t.Errorf("failure audited as %+v", e)
			}

			// A definite refusal ends the confirmation.
			_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, billing.CodeTokenInvalid)
			if n := len(f.provider.ApplyCalls()); n != 1 {
				t.Errorf("provider calls = %d, want 1", n)
			}
		})
	}
}

func TestChangePlanConfirmUnknownOutcomeIsRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"unavailable", fmt.Errorf("stripe: 503 secret-detail-42: %w", billing.ErrUnavailable)},
		{"deadline", fmt.Errorf("stripe: secret-detail-42: %w", context.DeadlineExceeded)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, billing.OpUpgrade, "scale")
			f.provider.ApplyErrs = []error{tt.err}
			before := f.store.Snapshot()

			_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, billing.CodeUpstreamUnavailable)
			wantPublicMessageClean(t, err, "secret-detail-42", "503", "stripe")

			// The unknown outcome is recorded: executing, to be settled.
			after := f.store.Snapshot()
			if c := after.Confirmations[p.ConfirmationID]; c.Status != billing.StatusExecuting {
				t.Errorf("status = %s, want executing", c.Status)
			}
			if sub := after.Accounts["org_vb"].Subscription; sub != before.Accounts["org_vb"].Subscription {
				t.Errorf("subscription changed: %+v", sub)
			}
			if got, want := eventsOf(after), []string{billing.EventTokenIssued, billing.EventTokenValidated, billing.EventOperationFailed}; !slices.Equal(got, want) {
				t.Errorf("audit = %v, want %v", got, want)
			}
			if e := lastEvent(t, after); e.Outcome != "unknown" || e.ConfirmationID != p.ConfirmationID {
				t.Errorf("unknown outcome audited as %+v", e)
			}

			// The token is still good, and the retry is the same provider request.
			res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, "")
			if !res.OK || res.Subscription.Plan != "scale" {
				t.Errorf("retry result = %+v", res)
			}
			calls := f.provider.ApplyCalls()
			if len(calls) != 2 || calls[0].Key != calls[1].Key || calls[0].Change != calls[1].Change {
				t.Errorf("calls = %+v, want two identical requests with the same idempotency key", calls)
			}
		})
	}
}

// The database fails between the provider's answer and the commit: the
// provider applied the change but the transaction rolled back to the
// recovery point, where the confirmation is executing, so it is settled
// whether or not the owner retries; the retry must not change the
// subscription twice.
func TestChangePlanConfirmCommitFailsAfterProviderApplied(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	failures := 1
	f.store.RecordErr = func(r billing.Record) error {
		if r.Subscription != nil && failures > 0 {
			failures--
			return fmt.Errorf("connection reset secret-detail-42: %w", billing.ErrUnavailable)
		}
		return nil
	}

	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	wantPublicMessageClean(t, err, "secret-detail-42", "connection reset")
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Errorf("status = %s, want executing after the rollback", c.Status)
	}
	if sub := f.subscription(); sub.Plan != "pro" || sub.Version != 1 {
		t.Errorf("subscription = %+v, want the rolled-back pro v1", sub)
	}

	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.OK || res.Subscription.Plan != "scale" {
		t.Errorf("retry result = %+v", res)
	}
	// The retry reads the subscription back and finds the change there
	// (its metadata names the confirmation): nothing is sent again.
	if calls := f.provider.ApplyCalls(); len(calls) != 1 {
		t.Errorf("calls = %+v, want the first alone", calls)
	}
	if f.provider.Changes() != 1 {
		t.Errorf("provider changed the subscription %d times, want 1", f.provider.Changes())
	}
}

func TestChangePlanInvalidRequest(t *testing.T) {
	tests := []struct {
		name string
		req  billing.ChangeRequest
	}{
		{"unknown operation", billing.ChangeRequest{Operation: "delete_plan", To: "scale"}},
		{"empty operation", billing.ChangeRequest{Operation: "", To: "scale"}},
		{"operation case", billing.ChangeRequest{Operation: "UPGRADE_PLAN", To: "scale"}},
		{"unknown operation with token", billing.ChangeRequest{Operation: "cancel_plan", To: "scale", ConfirmToken: "pbc_" + strings.Repeat("a", 43)}},
		{"path traversal", billing.ChangeRequest{Operation: billing.OpUpgrade, To: "../x"}},
		{"empty plan", billing.ChangeRequest{Operation: billing.OpUpgrade, To: ""}},
		{"65 chars", billing.ChangeRequest{Operation: billing.OpUpgrade, To: strings.Repeat("a", 65)}},
		{"upper case", billing.ChangeRequest{Operation: billing.OpUpgrade, To: "PRO"}},
		{"space", billing.ChangeRequest{Operation: billing.OpUpgrade, To: "pro "}},
		{"leading dash", billing.ChangeRequest{Operation: billing.OpUpgrade, To: "-pro"}},
		{"slash", billing.ChangeRequest{Operation: billing.OpDowngrade, To: "a/b"}},
		{"newline", billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro\n"}},
		{"bad plan with token", billing.ChangeRequest{Operation: billing.OpUpgrade, To: "../x", ConfirmToken: "pbc_" + strings.Repeat("a", 43)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			_, err := f.svc.ChangePlan(context.Background(), alice, tt.req)
			wantCode(t, err, billing.CodeInvalidRequest)
			for _, param := range []string{string(tt.req.Operation), tt.req.To} {
				if param != "" && strings.Contains(billing.PublicMessage(err), param) {
					t.Errorf("message %q echoes the parameter %q", billing.PublicMessage(err), param)
				}
			}
			st := f.store.Snapshot()
			if len(st.Confirmations) != 0 || len(st.Audit) != 0 || len(f.provider.Previews()) != 0 || len(f.provider.ApplyCalls()) != 0 {
				t.Error("an invalid request reached the store or the provider")
			}
		})
	}
}

func TestChangePlanPlanErrors(t *testing.T) {
	tests := []struct {
		name string
		op   billing.Operation
		to   string
		want billing.Code
	}{
		{"unknown plan", billing.OpUpgrade, "enterprise", billing.CodeUnknownPlan},
		{"upgrade to cheaper", billing.OpUpgrade, "free", billing.CodeInvalidPlanChange},
		{"downgrade to dearer", billing.OpDowngrade, "scale", billing.CodeInvalidPlanChange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			_, err := f.svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: tt.op, To: tt.to})
			wantCode(t, err, tt.want)
			if len(f.store.Snapshot().Confirmations) != 0 {
				t.Error("a confirmation was issued")
			}
		})
	}
}

func TestChangePlanProposeFailures(t *testing.T) {
	t.Run("unknown org", func(t *testing.T) {
		f := newHandshakeFixture(t)
		_, err := f.svc.ChangePlan(context.Background(), billing.Caller{Org: "org_nope", Principal: "x"}, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
		wantCode(t, err, billing.CodeNotFound)
	})
	t.Run("preview unavailable", func(t *testing.T) {
		f := newHandshakeFixture(t)
		f.provider.PreviewErr = fmt.Errorf("dial tcp 10.0.0.1: secret-detail-42: %w", billing.ErrUnavailable)
		_, err := f.svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
		wantCode(t, err, billing.CodeUpstreamUnavailable)
		wantPublicMessageClean(t, err, "secret-detail-42", "10.0.0.1")
		if len(f.store.Snapshot().Confirmations) != 0 {
			t.Error("a confirmation was issued without a preview")
		}
	})
	t.Run("preview currency differs", func(t *testing.T) {
		f := newHandshakeFixture(t)
		f.provider.Preview.Currency = "eur"
		_, err := f.svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
		wantCode(t, err, billing.CodeInternal)
		wantPublicMessageClean(t, err, "eur")
	})
}

func TestChangePlanMalformedToken(t *testing.T) {
	tests := []struct {
		name, token string
	}{
		{"no prefix", "hello"},
		{"prefix only", "pbc_"},
		{"too short", "pbc_abc"},
		{"wrong prefix", "pbx_" + strings.Repeat("a", 43)},
		{"not url safe", "pbc_" + strings.Repeat("a", 40) + "+/="},
		{"too long", "pbc_" + strings.Repeat("a", 77)},
		{"sql", "pbc_' OR 1=1 --aaaaaaaaaaaaaaaa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			f.propose(t, alice, billing.OpUpgrade, "scale")
			_, err := f.confirm(alice, billing.OpUpgrade, "scale", tt.token)
			wantCode(t, err, billing.CodeTokenInvalid)
			wantPublicMessageClean(t, err, tt.token)
			if len(f.provider.ApplyCalls()) != 0 {
				t.Error("provider called")
			}
			if e := lastEvent(t, f.store.Snapshot()); e.Event != billing.EventTokenRejected || e.Reason != "invalid" || e.ConfirmationID != "" {
				t.Errorf("audited as %+v, want TOKEN_REJECTED invalid without a confirmation", e)
			}
		})
	}
}

func TestChangePlanTokenOfSomeoneElse(t *testing.T) {
	tests := []struct {
		name   string
		caller billing.Caller
	}{
		{"unknown token", alice},
		{"other principal", billing.Caller{Org: alice.Org, Principal: "mallory"}},
		{"other org", billing.Caller{Org: "org_other", Principal: alice.Principal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, billing.OpUpgrade, "scale")
			token := p.ConfirmToken
			if tt.name == "unknown token" {
				token, _ = billing.NewToken()
			}
			_, err := f.confirm(tt.caller, billing.OpUpgrade, "scale", token)
			wantCode(t, err, billing.CodeTokenInvalid)
			if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusPending {
				t.Errorf("status = %s, want pending: nothing happens to the owner's token", c.Status)
			}
			if len(f.provider.ApplyCalls()) != 0 {
				t.Error("provider called")
			}
			// Still valid for its owner.
			_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			wantCode(t, err, "")
		})
	}
}

func TestChangePlanConfirmRejections(t *testing.T) {
	tests := []struct {
		name       string
		arrange    func(f handshakeFixture)
		op         billing.Operation
		to         string
		wantCode   billing.Code
		wantReason string
		wantStatus billing.Status
	}{
		{name: "expired", arrange: func(f handshakeFixture) { f.store.Advance(time.Minute + time.Nanosecond) },
			op: billing.OpUpgrade, to: "scale", wantCode: billing.CodeTokenExpired, wantReason: "expired", wantStatus: billing.StatusExpired},
		{name: "operation differs", op: billing.OpDowngrade, to: "scale",
			wantCode: billing.CodeTokenMismatch, wantReason: "mismatch", wantStatus: billing.StatusInvalidated},
		{name: "plan differs", op: billing.OpUpgrade, to: "free",
			wantCode: billing.CodeTokenMismatch, wantReason: "mismatch", wantStatus: billing.StatusInvalidated},
		{name: "subscription changed", arrange: func(f handshakeFixture) {
			f.store.Update(func(st *billingtest.State) {
				a := st.Accounts["org_vb"]
				a.Subscription.Version++
				st.Accounts["org_vb"] = a
			})
		}, op: billing.OpUpgrade, to: "scale", wantCode: billing.CodeTokenMismatch, wantReason: "mismatch", wantStatus: billing.StatusInvalidated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			p := f.propose(t, alice, billing.OpUpgrade, "scale")
			if tt.arrange != nil {
				tt.arrange(f)
			}
			_, err := f.confirm(alice, tt.op, tt.to, p.ConfirmToken)
			wantCode(t, err, tt.wantCode)
			if c := f.confirmation(t, p.ConfirmationID); c.Status != tt.wantStatus {
				t.Errorf("status = %s, want %s", c.Status, tt.wantStatus)
			}
			if e := lastEvent(t, f.store.Snapshot()); e.Event != billing.EventTokenRejected || e.Reason != tt.wantReason {
				t.Errorf("audited as %+v, want TOKEN_REJECTED %s", e, tt.wantReason)
			}
			if len(f.provider.ApplyCalls()) != 0 {
				t.Error("provider called")
			}
			// The rejection voided the token: the original request fails too.
			_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
			if code := billing.ErrorCode(err); code != billing.CodeTokenInvalid && code != billing.CodeTokenExpired {
				t.Errorf("original request after rejection: %v, want consent_token_invalid or _expired", err)
			}
		})
	}
}

func TestChangePlanSupersedes(t *testing.T) {
	f := newHandshakeFixture(t)
	first := f.propose(t, alice, billing.OpUpgrade, "scale")
	second := f.propose(t, alice, billing.OpUpgrade, "scale")
	if first.ConfirmToken == second.ConfirmToken || first.ConfirmationID == second.ConfirmationID {
		t.Fatal("second proposal reused the first's token or id")
	}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", first.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", second.ConfirmToken)
	wantCode(t, err, "")
}

func TestChangePlanConcurrentConfirm(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	const n = 16
	errs := make([]error, n)
	results := make([]billing.ChangeResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken) })
	}
	wg.Wait()
	executed, replayed := 0, 0
	for i, err := range errs {
		switch {
		case err != nil:
			t.Errorf("call %d got %v, want the result or its replay", i, err)
		case results[i].Replayed:
			replayed++
		default:
			executed++
		}
	}
	if executed != 1 || replayed != n-1 || len(f.provider.ApplyCalls()) != 1 {
		t.Errorf("%d executed, %d replayed, %d reached the provider; want 1, %d, 1", executed, replayed, len(f.provider.ApplyCalls()), n-1)
	}
}

// TestChangePlanUpperCaseCatalogCurrency: a catalog written with "USD" works
// with a provider that reports "usd", as Stripe does.
func TestChangePlanUpperCaseCatalogCurrency(t *testing.T) {
	f := newHandshakeFixture(t)
	plans := billing.DefaultPlans()
	for i := range plans {
		plans[i].Currency = "USD"
	}
	svc, err := billing.NewService(billing.Config{Store: f.store, Payments: f.provider, Catalog: testCatalog(t, plans), TokenTTL: time.Minute,
		Livemode: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
	wantCode(t, err, "")
}

// TestTestModeIsStatedAndBound: with a test-mode key the summary says so and
// details carry livemode false; a token issued in one mode does not execute
// in the other.
func TestTestModeIsStatedAndBound(t *testing.T) {
	f := newHandshakeFixture(t)
	testSvc, err := billing.NewService(billing.Config{Store: f.store, Payments: f.provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, Livemode: false})
	if err != nil {
		t.Fatal(err)
	}
	res, err := testSvc.ChangePlan(context.Background(), alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res.Summary, " Test mode: no real money moves.") || res.Details.Livemode {
		t.Fatalf("test-mode proposal: %q, livemode %t", res.Summary, res.Details.Livemode)
	}
	live := f.propose(t, alice, billing.OpUpgrade, "scale")
	if strings.Contains(live.Summary, "Test mode") || !live.Details.Livemode {
		t.Fatalf("live proposal: %q, livemode %t", live.Summary, live.Details.Livemode)
	}
	// The live service issued the live token; the test-mode service must
	// refuse it, and nothing reaches the provider.
	_, err = testSvc.ChangePlan(context.Background(), alice,
		billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale", ConfirmToken: live.ConfirmToken})
	wantCode(t, err, billing.CodeTokenMismatch)
	if n := len(f.provider.ApplyCalls()); n != 0 {
		t.Fatalf("%d changes reached the provider", n)
	}
}

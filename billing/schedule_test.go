package billing_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// Downgrades at the period's end (schedule.go), on billingtest's provider.
// The arithmetic and the wire of Stripe's schedules are checked against the
// Stripe fake and stripe-mock (internal/stripepay, integration).

// newScaleFixture is the handshake fixture with the org on Scale, so that a
// downgrade to Pro has a price to schedule, and a renewal preview with tax.
func newScaleFixture(t *testing.T) handshakeFixture {
	t.Helper()
	f := newHandshakeFixture(t)
	f.store.Update(func(st *billingtest.State) {
		a := st.Accounts["org_vb"]
		a.Subscription.Plan = "scale"
		st.Accounts["org_vb"] = a
	})
	f.provider.ReadState.PriceID = "price_billingd_scale"
	f.provider.Preview = billing.Preview{Currency: "usd", AtRenewal: &billing.Amounts{
		AmountDueCents: 2280, SubtotalCents: 1900, TaxCents: 380}}
	return f
}

// serviceWith is the fixture's service on another provider (one wrapping
// f.provider to make Stripe act at a chosen moment).
func (f handshakeFixture) serviceWith(t *testing.T, p billing.PaymentProvider) *billing.Service {
	t.Helper()
	svc, err := billing.NewService(billing.Config{Store: f.store, Payments: p,
		Catalog: testCatalog(t, billing.DefaultPlans()), TokenTTL: time.Minute, Livemode: true})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// cancellingChange schedules Scale → Pro at the period's end, then makes
// the first call of a downgrade to Free now, which cancels it.
func (f handshakeFixture) cancellingChange(t *testing.T) billing.ChangeResult {
	t.Helper()
	f.schedule(t)
	f.provider.Preview = billing.Preview{Currency: "usd", ProrationCents: -2000}
	return f.propose(t, alice, billing.OpDowngrade, "free")
}

func (f handshakeFixture) change(caller billing.Caller, req billing.ChangeRequest) (billing.ChangeResult, error) {
	return f.svc.ChangePlan(context.Background(), caller, req)
}

// schedule makes both calls of a period-end downgrade to Pro.
func (f handshakeFixture) schedule(t *testing.T) billing.ChangeResult {
	t.Helper()
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil || !first.Proposed() {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	res, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd,
		ConfirmToken: first.ConfirmToken})
	if err != nil {
		t.Fatalf("second call: %v", err)
	}
	return res
}

func TestPeriodEndDowngradeQuotesTheRenewalAndSchedulesIt(t *testing.T) {
	f := newScaleFixture(t)
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil || !first.Proposed() {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	d := first.Details
	if d.At != billing.AtPeriodEnd || !d.EffectiveAt.Equal(periodEnd) || d.AmountDueNowCents != 0 || d.CreditCents != 0 ||
		d.NextCharge == nil || *d.NextCharge != (billing.Amounts{AmountDueCents: 2280, SubtotalCents: 1900, TaxCents: 380}) {
		t.Errorf("details = %+v (next charge %+v)", d, d.NextCharge)
	}
	want := "Downgrade Vector Build from Scale ($49/mo) to Pro ($19/mo) at the end of the current period. Nothing changes or " +
		"is charged now; on May 30, 2026 the plan becomes Pro and $19.00 plus $3.80 tax: $22.80 will be charged then."
	if first.Summary != want {
		t.Errorf("summary\n got %q\nwant %q", first.Summary, want)
	}
	if p := f.provider.Previews(); len(p) != 1 || !p[0].AtPeriodEnd || !p[0].PeriodEnd.Equal(periodEnd) || p[0].ChargeNow {
		t.Errorf("preview asked for %+v, want the renewal at the period's end", p)
	}

	// The time of the change is bound into the token: a second call for
	// "now" is another change.
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", ConfirmToken: first.ConfirmToken})
	wantCode(t, err, billing.CodeTokenMismatch)
	if f.provider.Changes() != 0 {
		t.Fatal("a mismatching second call made a change")
	}

	res := f.schedule(t)
	sub := res.Subscription
	if sub == nil || sub.Plan != "scale" || sub.ScheduledChange == nil || sub.ScheduledChange.To != "pro" ||
		!sub.ScheduledChange.At.Equal(periodEnd) || sub.ScheduledChange.ConfirmationID == "" {
		t.Fatalf("second call's subscription = %+v, want Scale with Pro scheduled for the period's end", sub)
	}
	calls := f.provider.ApplyCalls()
	last := calls[len(calls)-1].Change
	if !last.AtPeriodEnd || last.NewPriceID != "price_billingd_pro" || last.FromPriceID != "price_billingd_scale" || last.ChargeNow {
		t.Errorf("provider asked for %+v, want a schedule of Pro at the period's end", last)
	}
	if got := f.subscription(); got.Plan != "scale" || got.Scheduled == nil || got.Scheduled.ConfirmationID != sub.ScheduledChange.ConfirmationID {
		t.Errorf("stored subscription = %+v", got)
	}
	view, err := f.svc.Subscription(context.Background(), alice)
	if err != nil || view.ScheduledChange == nil || view.ScheduledChange.To != "pro" {
		t.Errorf("GET subscription = %+v, %v; want the scheduled change", view, err)
	}

	// Asking again for what is scheduled is a no-op.
	again, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil || !again.Noop {
		t.Errorf("asking again = %+v, %v; want noop", again, err)
	}
}

func TestPeriodEndOnlyForDowngrades(t *testing.T) {
	f := newScaleFixture(t)
	_, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale", At: billing.AtPeriodEnd})
	wantCode(t, err, billing.CodeInvalidRequest)
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: "tomorrow"})
	wantCode(t, err, billing.CodeInvalidRequest)
}

func TestKeepingThePlanCancelsTheScheduledChange(t *testing.T) {
	f := newScaleFixture(t)
	// Nothing scheduled: the current plan is a no-op.
	if res, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"}); err != nil || !res.Noop {
		t.Fatalf("keep with nothing scheduled = %+v, %v; want noop", res, err)
	}
	scheduled := f.schedule(t).Subscription.ScheduledChange
	previews := len(f.provider.Previews())

	keep, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "scale", At: billing.AtPeriodEnd})
	if err != nil || !keep.Proposed() {
		t.Fatalf("keep's first call = %+v, %v", keep, err)
	}
	want := "Keep Scale: cancel the change to Pro scheduled for May 30, 2026. Nothing is charged now; Scale ($49/mo) " +
		"continues, next charge on May 30, 2026."
	if keep.Summary != want {
		t.Errorf("summary\n got %q\nwant %q", keep.Summary, want)
	}
	if c := keep.Details.CancelsScheduledChange; c == nil || c.To != "pro" || c.ConfirmationID != scheduled.ConfirmationID {
		t.Errorf("details.cancels_scheduled_change = %+v", c)
	}
	if len(f.provider.Previews()) != previews {
		t.Error("keeping the plan asked the provider for a preview; it costs nothing")
	}
	// The same body plus the token: keeping is the same request whatever
	// "at" says.
	res, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "scale", At: billing.AtPeriodEnd,
		ConfirmToken: keep.ConfirmToken})
	if err != nil || res.Subscription == nil || res.Subscription.Plan != "scale" || res.Subscription.ScheduledChange != nil {
		t.Fatalf("second call = %+v, %v; want Scale with nothing scheduled", res.Subscription, err)
	}
	calls := f.provider.ApplyCalls()
	last := calls[len(calls)-1].Change
	if !last.KeepPlan || last.Attached == nil || last.ChargeNow || last.AtPeriodEnd {
		t.Errorf("provider asked for %+v, want only the release of the attached schedule", last)
	}
	if f.subscription().Scheduled != nil {
		t.Error("the stored subscription still has the change scheduled")
	}
}

func TestAnotherChangeSaysItCancelsTheScheduledOne(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	if !strings.Contains(first.Summary, "This cancels the change to Pro scheduled for May 30, 2026.") ||
		first.Details.CancelsScheduledChange == nil {
		t.Errorf("summary %q / details %+v do not say the scheduled change is cancelled", first.Summary, first.Details)
	}
	res, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	if err != nil || res.Subscription.Plan != "free" || res.Subscription.ScheduledChange != nil {
		t.Fatalf("second call = %+v, %v", res.Subscription, err)
	}
	calls := f.provider.ApplyCalls()
	if last := calls[len(calls)-1].Change; last.Attached == nil || last.AtPeriodEnd {
		t.Errorf("provider asked for %+v, want the change now with the schedule released first", last)
	}
}

func TestScheduleMadeAtStripeIsDrift(t *testing.T) {
	f := newScaleFixture(t)
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil {
		t.Fatal(err)
	}
	// Someone schedules a move to Free in Stripe's dashboard; no webhook yet.
	f.provider.ReadState.Schedule = &billing.ProviderSchedule{ID: "sub_sched_dash", NextPriceID: "price_billingd_free", NextAt: periodEnd}
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd,
		ConfirmToken: first.ConfirmToken})
	wantCode(t, err, billing.CodeTokenMismatch)
	if f.provider.Changes() != 0 {
		t.Fatal("a change was sent over a schedule made at Stripe")
	}
	if sc := f.subscription().Scheduled; sc == nil || sc.ToPlan != "free" || sc.ConfirmationID != "" {
		t.Errorf("stored scheduled change = %+v, want Stripe's (to free)", sc)
	}
}

func TestRenewalAppliesTheScheduledChange(t *testing.T) {
	f := newScaleFixture(t)
	id := f.schedule(t).Subscription.ScheduledChange.ConfirmationID

	// Stripe's renewal: the subscription moves to Pro for the next period;
	// the schedule's last phase is the current one.
	next := periodEnd.Add(30 * 24 * time.Hour)
	f.provider.ReadState.PriceID, f.provider.ReadState.CurrentPeriodEnd = "price_billingd_pro", next
	f.provider.ReadState.Schedule = &billing.ProviderSchedule{ID: "sub_sched_" + id, ConfirmationID: id, PhaseStart: periodEnd}
	f.store.Advance(periodEnd.Sub(dbNow) + time.Minute)

	n, err := f.svc.SyncScheduledChanges(context.Background(), 0, 10)
	if err != nil || n != 1 {
		t.Fatalf("SyncScheduledChanges = %d, %v; want 1", n, err)
	}
	sub := f.subscription()
	if sub.Plan != "pro" || sub.Scheduled != nil || !sub.CurrentPeriodEnd.Equal(next) {
		t.Errorf("after the renewal: %+v, want Pro with nothing scheduled", sub)
	}
	var applied *billing.AuditEvent
	for _, e := range f.store.Snapshot().Audit {
		if e.Event == billing.EventScheduledChangeApplied {
			applied = &e
		}
	}
	if applied == nil || applied.ConfirmationID != id || applied.Principal != alice.Principal {
		t.Errorf("audit has %+v, want SCHEDULED_CHANGE_APPLIED of %s by alice", applied, id)
	}
	if n, _ := f.svc.SyncScheduledChanges(context.Background(), 0, 10); n != 0 {
		t.Errorf("a second sync looked at %d subscriptions, want none due", n)
	}
}

func TestSettleFindsAScheduleMadeBeforeTheAnswerWasLost(t *testing.T) {
	f := newScaleFixture(t)
	f.provider.ApplyErrs = []error{billing.ErrUnavailable}
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd,
		ConfirmToken: first.ConfirmToken})
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	// Stripe made the schedule; the answer was lost.
	f.provider.ReadState.Schedule = &billing.ProviderSchedule{ID: "sub_sched_1", ConfirmationID: first.ConfirmationID,
		NextPriceID: "price_billingd_pro", NextAt: periodEnd}
	f.store.Advance(time.Second)
	if n, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil || n != 1 {
		t.Fatalf("SettleUnknownOutcomes = %d, %v", n, err)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Status != billing.StatusExecuted {
		t.Errorf("status = %s, want executed", c.Status)
	}
	if sc := f.subscription().Scheduled; sc == nil || sc.ConfirmationID != first.ConfirmationID || sc.ScheduleID != "sub_sched_1" {
		t.Errorf("scheduled = %+v", sc)
	}
	if f.provider.Changes() != 0 {
		t.Error("settling sent the change again although Stripe showed it made")
	}
}

// TestPoliciesSeeAScheduledDowngradeWithNothingDueNow: a rule asking for
// approval of anything charged now does not match a period-end downgrade
// (nothing is due now, whatever the renewal charges), and a rule letting
// downgrades through does: the change is scheduled at once, as the policy's.
func TestPoliciesSeeAScheduledDowngradeWithNothingDueNow(t *testing.T) {
	f := newScaleFixture(t)
	zero := int64(0)
	f.store.Update(func(st *billingtest.State) {
		a := st.Accounts["org_vb"]
		a.Policy = billing.Policy{Rules: []billing.PolicyRule{
			{Name: "charges", AmountDueAboveCents: &zero, Action: billing.ActionApprove},
			{Name: "downgrades", Operation: billing.OpDowngrade, Action: billing.ActionAllow},
		}}
		st.Accounts["org_vb"] = a
	})
	res, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil || res.Proposed() || res.ApprovalRequired {
		t.Fatalf("first call = %+v, %v; want the change made at once under the allow rule", res, err)
	}
	if sc := res.Subscription.ScheduledChange; sc == nil || sc.To != "pro" {
		t.Fatalf("subscription = %+v, want Pro scheduled", res.Subscription)
	}
	c := f.confirmation(t, res.Subscription.ScheduledChange.ConfirmationID)
	if c.Consent == nil || c.Consent.Method != billing.ConsentPolicyAllow {
		t.Errorf("consent = %+v, want policy_allow", c.Consent)
	}
}

// Keeping the plan against Stripe's renewal, and a release that a refusal
// does not undo (found by review; each failed before its fix).

// TestKeepAfterTheRenewalIsNotMade: a keep whose release answer was lost,
// then the renewal makes the scheduled change: the keep is recorded as not
// made (renewed_first), never as executed, and billingd shows Pro.
func TestKeepAfterTheRenewalIsNotMade(t *testing.T) {
	f := newScaleFixture(t)
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	f.provider.ApplyErrs = []error{billing.ErrUnavailable} // the release never reached Stripe
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	// The period ends: Stripe moves the subscription to Pro; the schedule,
	// in its last phase, changes nothing more.
	f.provider.ReadState.PriceID = "price_billingd_pro"
	f.provider.ReadState.CurrentPeriodEnd = periodEnd.AddDate(0, 1, 0)
	f.provider.ReadState.Schedule.NextPriceID, f.provider.ReadState.Schedule.NextAt = "", time.Time{}
	f.store.Advance(5 * time.Minute) // the attempt is certainly over

	_, err = f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
	if !strings.Contains(billing.PublicMessage(err), "the plan was not kept") {
		t.Errorf("message %q does not say the plan was not kept", billing.PublicMessage(err))
	}
	if c := f.confirmation(t, keep.ConfirmationID); c.Status != billing.StatusFailed || c.Failure != "renewed_first" {
		t.Errorf("keep = %s/%s, want failed/renewed_first", c.Status, c.Failure)
	}
	if sub := f.subscription(); sub.Plan != "pro" || sub.Scheduled != nil {
		t.Errorf("billingd shows %+v; Stripe is on Pro with nothing scheduled", sub)
	}
	if !slices.Contains(eventsOf(f.store.Snapshot()), billing.EventScheduledChangeApplied) {
		t.Errorf("audit %v lacks SCHEDULED_CHANGE_APPLIED", eventsOf(f.store.Snapshot()))
	}
}

// renewsFirst is a provider at which the renewal makes the scheduled
// change just before a keep's release arrives.
type renewsFirst struct{ *billingtest.Provider }

func (p renewsFirst) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	if change.KeepPlan {
		p.ReadState.PriceID = "price_billingd_pro"
		p.ReadState.CurrentPeriodEnd = periodEnd.AddDate(0, 1, 0)
	}
	return p.Provider.ApplyPlanChange(ctx, change, key)
}

// TestKeepRacingTheRenewal: the release succeeds after the renewal made
// the change (the schedule was still attached, in its last phase): the
// answer says the plan was not kept, and billingd shows Pro.
func TestKeepRacingTheRenewal(t *testing.T) {
	f := newScaleFixture(t)
	f.svc = f.serviceWith(t, renewsFirst{f.provider})
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
	if c := f.confirmation(t, keep.ConfirmationID); c.Status != billing.StatusFailed || c.Failure != "renewed_first" {
		t.Errorf("keep = %s/%s, want failed/renewed_first", c.Status, c.Failure)
	}
	if sub := f.subscription(); sub.Plan != "pro" {
		t.Errorf("billingd shows %s; Stripe is on Pro", sub.Plan)
	}
}

// TestNoChangeQuotedOnceTheScheduledDateHasCome: billingd has not heard of
// the renewal yet; no first call quotes from the plan it is leaving, and a
// token for a keep whose date has come is void.
func TestNoChangeQuotedOnceTheScheduledDateHasCome(t *testing.T) {
	f := newScaleFixture(t)
	f.schedule(t)
	// The renewal margin is 3×STRIPE_TIMEOUT (default 30s) plus the skew.
	f.store.Advance(periodEnd.Sub(dbNow) - 100*time.Second)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	f.store.Advance(20 * time.Second)
	_, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "free"})
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	wantCode(t, err, billing.CodeTokenMismatch)
	if f.provider.Changes() != 1 {
		t.Errorf("%d changes at the provider, want only the schedule", f.provider.Changes())
	}
}

// TestRefusalAfterTheReleaseSchedulesItAgain: a change made now releases
// the scheduled change first; a declined card then refuses the change, but
// not the release. billingd schedules the released change again (the
// person agreed to cancel it only as part of the change), says so, and
// shows it scheduled, as Stripe has it.
func TestRefusalAfterTheReleaseSchedulesItAgain(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	scheduled := first.Details.CancelsScheduledChange
	// The release is made; the change is refused (billingtest's provider
	// fails before it changes anything, so the release is done by hand).
	f.provider.ReadState.Schedule = nil
	f.provider.ApplyErrs = []error{fmt.Errorf("card: %w", billing.ErrPaymentDeclined)}
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodePaymentFailed)
	if msg := billing.PublicMessage(err); !strings.Contains(msg, "the change to Pro scheduled for May 30, 2026 stays scheduled") {
		t.Errorf("message %q does not say the scheduled change stands", msg)
	}
	sub := f.subscription()
	if sub.Plan != "scale" || sub.Scheduled == nil || sub.Scheduled.ToPlan != "pro" ||
		sub.Scheduled.ConfirmationID != scheduled.ConfirmationID || !sub.Scheduled.At.Equal(periodEnd) {
		t.Errorf("billingd shows %+v (scheduled %+v); want Scale with the Pro change scheduled again", sub, sub.Scheduled)
	}
	if s := f.provider.ReadState.Schedule; !s.Scheduled() || s.ConfirmationID != scheduled.ConfirmationID {
		t.Errorf("at the provider: %+v, want the change scheduled again, named by its confirmation", s)
	}
}

// TestRefusalAfterTheReleaseSaysWhenItCannotScheduleItAgain: scheduling
// the released change again fails too: the answer says it was cancelled.
func TestRefusalAfterTheReleaseSaysWhenItCannotScheduleItAgain(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ReadState.Schedule = nil
	f.provider.ApplyErrs = []error{fmt.Errorf("card: %w", billing.ErrPaymentDeclined), billing.ErrUnavailable}
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodePaymentFailed)
	if msg := billing.PublicMessage(err); !strings.Contains(msg, "was cancelled at the payment provider") {
		t.Errorf("message %q does not say the scheduled change was cancelled", msg)
	}
	if sub := f.subscription(); sub.Scheduled != nil {
		t.Errorf("billingd shows %+v scheduled; Stripe has nothing scheduled", sub.Scheduled)
	}
}

// TestResendAfterItsOwnReleaseWasRecorded: a change made now that cancels
// a scheduled one; its release reached Stripe, the update's answer was
// lost, and the release's webhook was recorded before the settler came:
// the consent still holds (the scheduled change it cancels is gone, as it
// asked), so the change is sent again rather than recorded as not made.
func TestResendAfterItsOwnReleaseWasRecorded(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ApplyErrs = []error{billing.ErrUnavailable}
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	f.provider.ReadState.Schedule = nil // the release was made
	if _, err := f.svc.ReconcileSubscription(context.Background(), billing.SubscriptionEvent{EventID: "evt_released",
		Created: dbNow, SubscriptionID: "sub_1"}); err != nil {
		t.Fatal(err)
	}
	if f.subscription().Scheduled != nil {
		t.Fatal("the webhook did not record the release")
	}
	f.store.Advance(time.Second)
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Status != billing.StatusExecuted {
		t.Errorf("status %s/%s, want executed", c.Status, c.Failure)
	}
	if sub := f.subscription(); sub.Plan != "free" {
		t.Errorf("plan %s, want free", sub.Plan)
	}
}

// TestSyncGoesOnPastASubscriptionItCannotRead: one due subscription whose
// read fails does not hold up the others' renewals.
func TestSyncGoesOnPastASubscriptionItCannotRead(t *testing.T) {
	due := &billing.ScheduledChange{ToPlan: "pro", At: periodEnd, PriceID: "price_billingd_pro", ScheduleID: "sub_sched_x"}
	a, b := testAccount(), testAccount()
	b.Org.ID, b.Subscription.Org, b.Subscription.StripeSubscriptionID = "org_b", "org_b", "sub_b"
	for _, acct := range []*billing.Account{&a, &b} {
		acct.Subscription.Plan, acct.Subscription.Scheduled = "scale", due
	}
	store := billingtest.NewStore(periodEnd.Add(time.Hour), a, b)
	provider := &billingtest.Provider{ReadErrs: []error{billing.ErrUnavailable}, ReadState: billingtest.StateOf(a)}
	provider.ReadState.PriceID = "price_billingd_pro" // renewed
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	n, err := svc.SyncScheduledChanges(context.Background(), time.Minute, 10)
	if err != nil || n != 2 {
		t.Fatalf("SyncScheduledChanges = %d, %v; want both looked at", n, err)
	}
	renewed := 0
	for _, acct := range store.Snapshot().Accounts {
		if acct.Subscription.Plan == "pro" && acct.Subscription.Scheduled == nil {
			renewed++
		}
	}
	if renewed != 1 {
		t.Errorf("%d subscriptions recorded renewed, want the one that could be read", renewed)
	}
}

// TestOpaqueScheduleIsDrift: a schedule made at Stripe that changes what
// billingd does not state (it cancels the subscription at its end) is
// neither shown as a plan change nor ever overwritten or released: a
// second call finds it and sends nothing.
func TestOpaqueScheduleIsDrift(t *testing.T) {
	f := newScaleFixture(t)
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil {
		t.Fatal(err)
	}
	f.provider.ReadState.Schedule = &billing.ProviderSchedule{ID: "sub_sched_cancel", Opaque: true}
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd,
		ConfirmToken: first.ConfirmToken})
	wantCode(t, err, billing.CodeTokenMismatch)
	if f.provider.Changes() != 0 {
		t.Fatal("a change was sent over a schedule billingd cannot state")
	}
}

// TestNoResendOnceTheDateHasCome: a period-end change whose answer was
// lost shortly before the period ended is not sent again once the renewal
// is within the margin a request could take, even within the token's
// lifetime: it could land after the renewal. It is recorded as not made.
func TestNoResendOnceTheDateHasCome(t *testing.T) {
	f := newScaleFixture(t)
	f.store.Advance(periodEnd.Sub(dbNow) - 100*time.Second) // outside the renewal margin (90s)
	first, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil {
		t.Fatal(err)
	}
	f.provider.ApplyErrs = []error{billing.ErrUnavailable} // never reached Stripe
	_, err = f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd,
		ConfirmToken: first.ConfirmToken})
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	f.store.Advance(20 * time.Second) // within the renewal margin, and CONFIRM_TTL
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if f.provider.Changes() != 0 {
		t.Fatal("the change was sent again after the date it was agreed for")
	}
	f.store.Advance(2 * time.Minute) // the attempt is certainly over
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Status != billing.StatusFailed || c.Failure != "not_applied" {
		t.Errorf("status %s/%s, want failed/not_applied", c.Status, c.Failure)
	}
}

// Found by the second review; each failed before its fix.

// unknownAfterRelease is a provider at which a keep's release is made and
// the read that follows it fails (stripepay answers ErrUnavailable then).
type unknownAfterRelease struct{ *billingtest.Provider }

func (p unknownAfterRelease) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	applied, err := p.Provider.ApplyPlanChange(ctx, change, key)
	if err == nil && change.KeepPlan {
		return billing.AppliedChange{}, fmt.Errorf("read subscription after release: %w", billing.ErrUnavailable)
	}
	return applied, err
}

// TestKeepWhoseReadBackFailedIsSettledAsMade: the keep's release was made,
// the read after it failed; the release's webhook comes first, then the
// settler: the keep is recorded as executed, with its receipt, never as
// "nothing was changed".
func TestKeepWhoseReadBackFailedIsSettledAsMade(t *testing.T) {
	f := newScaleFixture(t)
	f.svc = f.serviceWith(t, unknownAfterRelease{f.provider})
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	if _, err := f.svc.ReconcileSubscription(context.Background(), billing.SubscriptionEvent{EventID: "evt_rel",
		Created: dbNow, SubscriptionID: "sub_1"}); err != nil {
		t.Fatal(err)
	}
	f.store.Advance(time.Second)
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, keep.ConfirmationID); c.Status != billing.StatusExecuted {
		t.Errorf("keep = %s/%s, want executed", c.Status, c.Failure)
	}
}

// TestRateLimitAfterTheReleaseIsNotARetry: a change made now whose update
// is rate-limited after the release of the scheduled change: the answer is
// not "retry the same call" (the schedule, made again, is another one: the
// token's terms no longer hold), and it says both that the change was not
// made and that the scheduled one stands.
func TestRateLimitAfterTheReleaseIsNotARetry(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ReadState.Schedule = nil // the release was made
	f.provider.ApplyErrs = []error{fmt.Errorf("429: %w", billing.ErrRateLimited)}
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodeTokenMismatch)
	msg := billing.PublicMessage(err)
	if strings.Contains(msg, "Retry the same call") || !strings.Contains(msg, "it was not made") ||
		!strings.Contains(msg, "scheduled for May 30, 2026 stays scheduled") {
		t.Errorf("answer %q", msg)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Status != billing.StatusRevoked {
		t.Errorf("status %s, want revoked", c.Status)
	}
}

// TestResendOnlyAfterItsOwnRelease: a change made now that cancels the
// scheduled one, its answer lost; webhooks then record the subscription
// past_due on another period with the schedule gone. That is not the
// change's own release: nothing is sent again.
func TestResendOnlyAfterItsOwnRelease(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ApplyErrs = []error{billing.ErrUnavailable} // never reached Stripe
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	changes := f.provider.Changes()
	f.provider.ReadState.Schedule = nil
	f.provider.ReadState.Status = "past_due"
	f.provider.ReadState.CurrentPeriodEnd = periodEnd.Add(-7 * 24 * time.Hour)
	if _, err := f.svc.ReconcileSubscription(context.Background(), billing.SubscriptionEvent{EventID: "evt_dash",
		Created: dbNow, SubscriptionID: "sub_1"}); err != nil {
		t.Fatal(err)
	}
	f.store.Advance(time.Second)
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if f.provider.Changes() != changes {
		t.Error("the change was sent again on a subscription whose status and period changed since the quote")
	}
}

// TestKeepOnAThirdPriceIsNotMade: the keep's read-back shows a price that
// is neither the plan kept nor the scheduled one (changed in the
// dashboard): the keep is not recorded as made.
func TestKeepOnAThirdPriceIsNotMade(t *testing.T) {
	f := newScaleFixture(t)
	f.svc = f.serviceWith(t, thirdPriceAtRelease{f.provider})
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	if err == nil {
		t.Fatal("a keep on another price answered ok")
	}
	if c := f.confirmation(t, keep.ConfirmationID); c.Status == billing.StatusExecuted {
		t.Errorf("keep recorded executed on a third price")
	}
	if sub := f.subscription(); sub.Plan != "free" {
		t.Errorf("billingd shows %s; Stripe is on Free", sub.Plan)
	}
}

// thirdPriceAtRelease: someone moved the subscription to Free in the
// dashboard just before the keep's release.
type thirdPriceAtRelease struct{ *billingtest.Provider }

func (p thirdPriceAtRelease) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	if change.KeepPlan {
		p.ReadState.PriceID = "price_billingd_free"
	}
	return p.Provider.ApplyPlanChange(ctx, change, key)
}

// TestRateLimitedProbeLeavesTheOutcomeUnknown: the settler's same-key
// probe of a change whose answer was lost is rate-limited: that says
// nothing of the first request under the key, so the confirmation stays
// executing (settled later), never back to pending.
func TestRateLimitedProbeLeavesTheOutcomeUnknown(t *testing.T) {
	f := newHandshakeFixture(t)
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	f.provider.ApplyErrs = []error{billing.ErrUnavailable, fmt.Errorf("429: %w", billing.ErrRateLimited)}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	f.store.Advance(time.Second)
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Errorf("status %s after a rate-limited probe, want executing", c.Status)
	}
}

// TestPeriodEndNeedsAnActiveSubscription: a trial or an unpaid period ends
// otherwise than by the renewal billingd quotes: no period-end change.
func TestPeriodEndNeedsAnActiveSubscription(t *testing.T) {
	f := newScaleFixture(t)
	f.store.Update(func(st *billingtest.State) {
		a := st.Accounts["org_vb"]
		a.Subscription.Status = "trialing"
		st.Accounts["org_vb"] = a
	})
	_, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	wantCode(t, err, billing.CodeInvalidPlanChange)
	if len(f.provider.Previews()) != 0 {
		t.Error("a preview was asked for")
	}
}

// TestProposalAsksByTheSecondCallsRule: a transport holding only a
// proposal (MCP's request state) judges a later call by the rule of the
// second call: the time is part of a period-end change, and not of a keep.
func TestProposalAsksByTheSecondCallsRule(t *testing.T) {
	f := newScaleFixture(t)
	later, err := f.change(alice, billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd})
	if err != nil {
		t.Fatal(err)
	}
	if !later.Asks(billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro", At: billing.AtPeriodEnd}) ||
		later.Asks(billing.ChangeRequest{Operation: billing.OpDowngrade, To: "pro"}) ||
		later.Asks(billing.ChangeRequest{Operation: billing.OpDowngrade, To: "free", At: billing.AtPeriodEnd}) {
		t.Error("a period-end proposal is asked for by its plan and its time only")
	}
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpDowngrade, "scale")
	for _, at := range []string{"", billing.AtNow, billing.AtPeriodEnd} {
		if !keep.Asks(billing.ChangeRequest{Operation: billing.OpDowngrade, To: "scale", At: at}) {
			t.Errorf("keeping the plan is not asked for with at %q", at)
		}
	}
	if keep.Asks(billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"}) {
		t.Error("another operation asks for the keep")
	}
}

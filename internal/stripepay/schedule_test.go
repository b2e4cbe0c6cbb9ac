package stripepay

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/internal/testenv"
)

// Changes at the period's end, against the fake: subscription schedules
// and their renewal.

const (
	priceStarter = "price_billingd_starter"
	priceFree    = "price_billingd_free"
)

// firstPeriodEnd is the end of the fake subscription's first period.
var firstPeriodEnd = periodStart.Add(30 * 24 * time.Hour)

// newScheduleEnv is newFakeEnv with a Starter (900) and a Free price too.
func newScheduleEnv(t *testing.T) fakeEnv {
	t.Helper()
	env := newFakeEnv(t, Config{})
	env.fake.SetPrice(priceStarter, 900, "usd")
	env.fake.SetPrice(priceFree, 0, "usd")
	return env
}

// atPeriodEnd is Pro → price at the end of the current period, as billing
// sends it for confirmation cfm.
func (e fakeEnv) atPeriodEnd(price, cfm string) billing.PlanChange {
	return billing.PlanChange{
		CustomerID: e.cust.CustomerID, SubscriptionID: e.cust.SubscriptionID, ItemID: e.cust.ItemID,
		NewPriceID: price, FromPriceID: pricePro, AtPeriodEnd: true, PeriodEnd: firstPeriodEnd, ConfirmationID: cfm,
	}
}

// read is ReadSubscription, failing the test on error.
func (e fakeEnv) read(t *testing.T) billing.ProviderSubscription {
	t.Helper()
	state, err := e.p.ReadSubscription(context.Background(), e.cust.SubscriptionID)
	if err != nil {
		t.Fatalf("read subscription: %v", err)
	}
	return state
}

func (e fakeEnv) schedules() []stripepaytest.Schedule { return e.fake.State().Schedules }

// scheduleStarter schedules Pro → Starter at the period's end (confirmation
// cfm_1, key k1), as a second call would.
func (e fakeEnv) scheduleStarter(t *testing.T) billing.AppliedChange {
	t.Helper()
	applied, err := e.p.ApplyPlanChange(context.Background(), e.atPeriodEnd(priceStarter, "cfm_1"), "k1")
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// keep is keeping Pro, as billing sends it for confirmation cfm, with the
// schedule attached as read.
func (e fakeEnv) keep(cfm string, attached *billing.ProviderSchedule) billing.PlanChange {
	return billing.PlanChange{CustomerID: e.cust.CustomerID, SubscriptionID: e.cust.SubscriptionID, ItemID: e.cust.ItemID,
		NewPriceID: pricePro, FromPriceID: pricePro, KeepPlan: true, ConfirmationID: cfm, Attached: attached}
}

// TestFakePreviewAtRenewal: the renewal invoice at Starter under a 20%
// coupon, 10% exclusive tax and $5.00 of credit, by Stripe's rules:
// discount 180, tax 10% of 720 = 72, total 792, 500 of credit applied,
// 292 due. Nothing is due or prorated now. The renewal, when the clock
// gets there, charges it.
func TestFakePreviewAtRenewal(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	env.fake.SetCustomerDiscount(env.cust.CustomerID, stripepaytest.Coupon{PercentOff: 20})
	env.fake.SetTaxRate(env.cust.SubscriptionID, stripepaytest.TaxRate{Percentage: 10})
	env.fake.SetCustomerBalance(env.cust.CustomerID, -500)

	got, err := env.p.PreviewPlanChange(context.Background(), env.atPeriodEnd(priceStarter, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := billing.Preview{Currency: "usd", AtRenewal: &billing.Amounts{
		SubtotalCents: 900, DiscountCents: 180, TaxCents: 72, CreditAppliedCents: 500, AmountDueCents: 292}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v (at renewal %+v), want %+v (%+v)", got, got.AtRenewal, want, want.AtRenewal)
	}

	if _, err := env.p.ApplyPlanChange(context.Background(), env.atPeriodEnd(priceStarter, "cfm_1"), "k"); err != nil {
		t.Fatal(err)
	}
	env.fake.AdvanceClock(30 * 24 * time.Hour)
	if inv := env.read(t).LatestInvoice; inv == nil || inv.AmountDueCents != 292 {
		t.Errorf("renewal invoice %+v, want 292 due as previewed", inv)
	}
}

// TestFakeApplyAtPeriodEnd: a schedule from the subscription, its phases
// and the confirmation in its metadata; the subscription is unchanged
// until its period ends, then on Starter; after the schedule's last phase
// it is released. A retry with the same key is replayed.
func TestFakeApplyAtPeriodEnd(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	change := env.atPeriodEnd(priceStarter, "cfm_1")
	got, err := env.p.ApplyPlanChange(context.Background(), change, "k")
	if err != nil {
		t.Fatal(err)
	}
	scheds := env.schedules()
	if len(scheds) != 1 {
		t.Fatalf("%d schedules, want 1", len(scheds))
	}
	wantSched := &billing.ProviderSchedule{ID: scheds[0].ID, ConfirmationID: "cfm_1", PhaseStart: periodStart,
		NextPriceID: priceStarter, NextAt: firstPeriodEnd, NextQuantity: 1}
	want := billing.AppliedChange{Status: "active", CurrentPeriodEnd: firstPeriodEnd, ItemID: env.cust.ItemID, Schedule: wantSched}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v (schedule %+v), want %+v (%+v)", got, got.Schedule, want, wantSched)
	}
	if s := scheds[0]; s.EndBehavior != "release" || len(s.Phases) != 2 || s.Phases[1].Items[0].PriceID != priceStarter ||
		s.Metadata[MetadataConfirmationID] != "cfm_1" {
		t.Errorf("schedule %+v", s)
	}

	again, err := env.p.ApplyPlanChange(context.Background(), change, "k")
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("retry: %+v, %v; want the first answer", again, err)
	}
	if n := len(env.schedules()); n != 1 {
		t.Errorf("%d schedules after the retry, want 1", n)
	}

	state := env.read(t)
	if state.PriceID != pricePro || !reflect.DeepEqual(state.Schedule, wantSched) {
		t.Errorf("read before the period's end: price %s, schedule %+v; want %s, %+v", state.PriceID, state.Schedule, pricePro, wantSched)
	}
	env.fake.AdvanceClock(30 * 24 * time.Hour)
	state = env.read(t)
	applied := &billing.ProviderSchedule{ID: wantSched.ID, ConfirmationID: "cfm_1", PhaseStart: firstPeriodEnd}
	if state.PriceID != priceStarter || !state.CurrentPeriodEnd.Equal(firstPeriodEnd.Add(30*24*time.Hour)) ||
		!reflect.DeepEqual(state.Schedule, applied) || state.Schedule.Scheduled() {
		t.Errorf("read after the period's end: %+v, schedule %+v; want Starter, %+v", state, state.Schedule, applied)
	}
	env.fake.AdvanceClock(30 * 24 * time.Hour)
	if state = env.read(t); state.Schedule != nil || state.PriceID != priceStarter {
		t.Errorf("read after the schedule's end: price %s, schedule %+v; want Starter, none", state.PriceID, state.Schedule)
	}
}

// TestFakeApplyReusesBareSchedule: an attempt that died after creating the
// schedule left it bare; the retry sets its phases rather than making
// another.
func TestFakeApplyReusesBareSchedule(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	if _, err := env.p.createSchedule(context.Background(), env.cust.SubscriptionID, "k:schedule"); err != nil {
		t.Fatal(err)
	}
	attached := env.read(t).Schedule
	if attached.Scheduled() || attached.ConfirmationID != "" || attached.Opaque || !attached.PhaseStart.Equal(periodStart) {
		t.Fatalf("attached %+v, want bare, its phase from %v", attached, periodStart)
	}
	change := env.atPeriodEnd(priceStarter, "cfm_1")
	change.Attached = attached
	got, err := env.p.ApplyPlanChange(context.Background(), change, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got.Schedule == nil || got.Schedule.ID != attached.ID || got.Schedule.NextPriceID != priceStarter {
		t.Errorf("schedule %+v, want %s moving to Starter", got.Schedule, attached.ID)
	}
	if n := len(env.schedules()); n != 1 {
		t.Errorf("%d schedules, want the bare one reused", n)
	}
}

// TestFakeApplyOwnScheduleNotReleased: a retry of a change whose schedule
// is already set (the answer was lost) finds it attached, named by its own
// confirmation: it is kept, not released.
func TestFakeApplyOwnScheduleNotReleased(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	change := env.atPeriodEnd(priceStarter, "cfm_1")
	first, err := env.p.ApplyPlanChange(context.Background(), change, "k")
	if err != nil {
		t.Fatal(err)
	}
	change.Attached = env.read(t).Schedule
	again, err := env.p.ApplyPlanChange(context.Background(), change, "k")
	if err != nil || !reflect.DeepEqual(again, first) {
		t.Errorf("retry: %+v, %v; want %+v", again, err, first)
	}
	if s := env.read(t).Schedule; !s.Scheduled() || s.ID != first.Schedule.ID {
		t.Errorf("schedule after the retry %+v, want %s still scheduled", s, first.Schedule.ID)
	}
}

// TestFakeKeepPlan releases the schedule and changes nothing else.
func TestFakeKeepPlan(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	env.scheduleStarter(t)
	attached := env.read(t).Schedule
	keep := env.keep("cfm_2", attached)
	got, err := env.p.ApplyPlanChange(context.Background(), keep, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if got.PriceID != pricePro || got.Status != "active" || got.Schedule != nil {
		t.Errorf("got %+v, want the subscription read back on Pro", got)
	}
	if s, _ := env.fake.Schedule(attached.ID); s.Status != "released" {
		t.Errorf("schedule %s, want released", s.Status)
	}
	env.fake.AdvanceClock(30 * 24 * time.Hour)
	if state := env.read(t); state.Schedule != nil || state.PriceID != pricePro {
		t.Errorf("after the period: price %s, schedule %+v; want Pro, none", state.PriceID, state.Schedule)
	}
	// Released by someone else since it was read: counts as released.
	if _, err := env.p.ApplyPlanChange(context.Background(), keep, "k3"); err != nil {
		t.Errorf("release of a released schedule under a new key: %v", err)
	}
}

// TestFakeChangeNowReleasesSchedule: an upgrade now while a downgrade is
// scheduled releases the schedule first, so the period's end does not undo
// the upgrade.
func TestFakeChangeNowReleasesSchedule(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	env.scheduleStarter(t)
	up := env.change(priceScale, true)
	up.ConfirmationID, up.FromPriceID, up.Attached = "cfm_2", pricePro, env.read(t).Schedule
	got, err := env.p.ApplyPlanChange(context.Background(), up, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Schedule != nil || got.Invoice == nil || got.Invoice.AmountDueCents != 1500 {
		t.Errorf("got %+v, want the upgrade's 1500 invoice and no schedule", got)
	}
	if s, _ := env.fake.Schedule(up.Attached.ID); s.Status != "released" {
		t.Errorf("schedule %s, want released", s.Status)
	}
	env.fake.AdvanceClock(30 * 24 * time.Hour)
	if state := env.read(t); state.PriceID != priceScale || state.Schedule != nil {
		t.Errorf("after the period: price %s, schedule %+v; want Scale, none", state.PriceID, state.Schedule)
	}
}

// TestFakeReplaceScheduledChange: another change at the period's end sets
// the phases of the attached schedule in one request: the first change is
// replaced, never released before the second is made.
func TestFakeReplaceScheduledChange(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	first := env.scheduleStarter(t)
	change := env.atPeriodEnd(priceFree, "cfm_2")
	change.Attached = env.read(t).Schedule
	second, err := env.p.ApplyPlanChange(context.Background(), change, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if second.Schedule == nil || second.Schedule.ID != first.Schedule.ID || second.Schedule.NextPriceID != priceFree ||
		second.Schedule.ConfirmationID != "cfm_2" {
		t.Errorf("second schedule %+v, want %s moving to Free", second.Schedule, first.Schedule.ID)
	}
	if n := len(env.schedules()); n != 1 {
		t.Errorf("%d schedules, want the one replaced in place", n)
	}
	if s := env.read(t).Schedule; s == nil || s.ID != second.Schedule.ID {
		t.Errorf("attached %+v, want %s", s, second.Schedule.ID)
	}
}

// TestFakeScheduleErrors: a schedule Stripe does not know is a refusal, not
// "already released"; an outage while releasing is an outage.
func TestFakeScheduleErrors(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	keep := billing.PlanChange{SubscriptionID: env.cust.SubscriptionID, KeepPlan: true,
		Attached: &billing.ProviderSchedule{ID: "sub_sched_nope", NextPriceID: priceStarter}}
	_, err := env.p.ApplyPlanChange(context.Background(), keep, "k1")
	assertKind(t, err, billing.ErrProviderRejected)

	if _, err := env.p.ApplyPlanChange(context.Background(), env.atPeriodEnd(priceStarter, "cfm_1"), "k2"); err != nil {
		t.Fatal(err)
	}
	keep.Attached = env.read(t).Schedule
	env.fake.FailNextAt(stripepaytest.ReleaseSchedule, stripepaytest.ServerError)
	_, err = env.p.ApplyPlanChange(context.Background(), keep, "k3")
	assertKind(t, err, billing.ErrUnavailable)

	noFrom := env.atPeriodEnd(priceStarter, "cfm_3")
	noFrom.FromPriceID = ""
	if _, err := env.p.ApplyPlanChange(context.Background(), noFrom, "k4"); err == nil {
		t.Error("a change at period end without its current price was accepted")
	}
	if n := len(env.schedules()); n != 1 {
		t.Errorf("%d schedules, want none made for the refused change", n)
	}

	long := env.atPeriodEnd(priceStarter, "cfm_3")
	_, err = env.p.ApplyPlanChange(context.Background(), long, string(make([]byte, 250)))
	if err == nil {
		t.Error("a key too long for its :schedule suffix was accepted")
	}
}

// TestScheduleEvents: webhook events about schedules name the
// subscription, also once released; billing reads it from there.
func TestScheduleEvents(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	first := env.scheduleStarter(t)
	change := env.atPeriodEnd(priceFree, "cfm_2") // replaces the phases: updated
	change.Attached = first.Schedule
	if _, err := env.p.ApplyPlanChange(context.Background(), change, "k2"); err != nil {
		t.Fatal(err)
	}
	keep := env.keep("cfm_3", env.read(t).Schedule) // released
	if _, err := env.p.ApplyPlanChange(context.Background(), keep, "k3"); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_test"
	seen := map[string]bool{}
	for _, ev := range env.fake.Events() {
		if !strings.HasPrefix(ev.Type, "subscription_schedule.") {
			continue
		}
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: ev.Payload, Secret: secret})
		got, ok, err := ParseSubscriptionEvent(signed.Payload, signed.Header, secret)
		if err != nil || !ok {
			t.Errorf("%s: %v, %v", ev.Type, ok, err)
			continue
		}
		if got.SubscriptionID != env.cust.SubscriptionID || got.EventID != ev.ID || !got.Created.Equal(ev.Created) {
			t.Errorf("%s: %+v", ev.Type, got)
		}
		seen[ev.Type] = true
	}
	for _, typ := range []string{"subscription_schedule.created", "subscription_schedule.updated", "subscription_schedule.released"} {
		if !seen[typ] {
			t.Errorf("no %s event parsed", typ)
		}
	}

	// A schedule with no subscription (made for a customer) is no hint.
	payload := []byte(`{"id":"evt_1","object":"event","type":"subscription_schedule.created","created":1780000000,` +
		`"api_version":"2024-06-20","data":{"object":{"id":"sub_sched_1","object":"subscription_schedule",` +
		`"status":"not_started","subscription":null,"released_subscription":null}}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	if _, ok, err := ParseSubscriptionEvent(signed.Payload, signed.Header, secret); ok || err != nil {
		t.Errorf("a schedule without a subscription: %v, %v; want ignored", ok, err)
	}
	// An event about something else is ignored.
	payload = []byte(`{"id":"evt_2","object":"event","type":"invoice.created","created":1780000000,` +
		`"api_version":"2024-06-20","data":{"object":{"id":"in_1","object":"invoice"}}}`)
	signed = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	if _, ok, err := ParseSubscriptionEvent(signed.Payload, signed.Header, secret); ok || err != nil {
		t.Errorf("invoice.created: %v, %v; want ignored", ok, err)
	}
}

// TestStripeMockSchedule: the schedule requests (create from the
// subscription, phases, release), the renewal preview and the read with
// the schedule expanded are valid for Stripe's API spec. stripe-mock is
// stateless: only the wire format and the mapping are checked.
func TestStripeMockSchedule(t *testing.T) {
	t.Parallel()
	base := testenv.StripeMock(t)
	p := New(Config{SecretKey: "sk_test_123", APIBase: base})
	ctx := context.Background()
	change := mockChange(false)
	change.ProrationDate = time.Time{}
	change.AtPeriodEnd, change.FromPriceID, change.ConfirmationID = true, "price_456", "cfm_1"
	change.PeriodEnd = time.Now().Add(24 * time.Hour).Truncate(time.Second)

	preview, err := p.PreviewPlanChange(ctx, change)
	if err != nil {
		t.Fatal(err)
	}
	if preview.AtRenewal == nil || preview.Currency == "" || preview.AmountDueNowCents != 0 {
		t.Errorf("preview %+v, want the renewal's amounts only", preview)
	}

	// A new schedule: the create, then the phases.
	got, err := p.ApplyPlanChange(ctx, change, "cfm_1:apply")
	if err != nil {
		t.Fatal(err)
	}
	if got.Schedule == nil || got.Schedule.ID == "" || !got.CurrentPeriodEnd.Equal(change.PeriodEnd) || got.ItemID != change.ItemID {
		t.Errorf("got %+v", got)
	}
	// An attached schedule is read first; stripe-mock's fixture is not
	// started, with another price: not the one billing read, so nothing
	// is sent over it.
	change.Attached = &billing.ProviderSchedule{ID: "sub_sched_123", ConfirmationID: "cfm_0", NextPriceID: "price_789",
		NextAt: change.PeriodEnd, PhaseStart: time.Now().Add(-24 * time.Hour).Truncate(time.Second)}
	_, err = p.ApplyPlanChange(ctx, change, "cfm_1:apply")
	assertKind(t, err, billing.ErrProviderRejected)

	keep := mockChange(false)
	keep.KeepPlan, keep.Attached = true, &billing.ProviderSchedule{ID: "sub_sched_123", NextPriceID: "price_789"}
	if _, err := p.ApplyPlanChange(ctx, keep, "cfm_2:apply"); err != nil {
		t.Errorf("release: %v", err)
	}

	if _, err := p.ReadSubscription(ctx, "sub_123"); err != nil {
		t.Errorf("read with the schedule expanded: %v", err)
	}
	// The expansion itself, which ReadSubscription only maps: stripe-mock
	// answers with its fixture's schedule, or null.
	api := client.New("sk_test_123", &stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend,
		&stripe.BackendConfig{URL: stripe.String(base), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})})
	params := &stripe.SubscriptionParams{}
	params.AddExpand("schedule")
	if _, err := api.Subscriptions.Get("sub_123", params); err != nil {
		t.Errorf("expand schedule: %v", err)
	}
}

// TestPhasesKeepTheCurrentSettings: the phases billingd sends keep the tax
// rates, discounts, payment method and collection method of the current
// phase (Stripe replaces every phase and applies its settings when it
// starts): only the price changes.
func TestPhasesKeepTheCurrentSettings(t *testing.T) {
	t.Parallel()
	cm := stripe.SubscriptionCollectionMethodChargeAutomatically
	current := &stripe.SubscriptionSchedulePhase{
		DefaultTaxRates:      []*stripe.TaxRate{{ID: "txr_vat"}},
		Discounts:            []*stripe.SubscriptionSchedulePhaseDiscount{{Discount: &stripe.Discount{ID: "di_1"}}, {Coupon: &stripe.Coupon{ID: "co_10"}}},
		DefaultPaymentMethod: &stripe.PaymentMethod{ID: "pm_card"},
		CollectionMethod:     &cm,
		Items:                []*stripe.SubscriptionSchedulePhaseItem{{TaxRates: []*stripe.TaxRate{{ID: "txr_item"}}}},
		AutomaticTax:         &stripe.SubscriptionAutomaticTax{Enabled: true},
		InvoiceSettings:      &stripe.SubscriptionSchedulePhaseInvoiceSettings{DaysUntilDue: 14, AccountTaxIDs: []*stripe.TaxID{{ID: "txi_1"}}},
	}
	ph := &stripe.SubscriptionSchedulePhaseParams{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(pricePro)}}}
	keepSettings(ph, current)
	switch {
	case ph.AutomaticTax == nil || !*ph.AutomaticTax.Enabled,
		ph.InvoiceSettings == nil || *ph.InvoiceSettings.DaysUntilDue != 14 || *ph.InvoiceSettings.AccountTaxIDs[0] != "txi_1":
		t.Errorf("phase params %+v do not keep automatic tax and invoice terms", ph)
	}
	switch {
	case len(ph.DefaultTaxRates) != 1 || *ph.DefaultTaxRates[0] != "txr_vat",
		len(ph.Discounts) != 2 || *ph.Discounts[0].Discount != "di_1" || *ph.Discounts[1].Coupon != "co_10",
		ph.DefaultPaymentMethod == nil || *ph.DefaultPaymentMethod != "pm_card",
		ph.CollectionMethod == nil || *ph.CollectionMethod != "charge_automatically",
		len(ph.Items[0].TaxRates) != 1 || *ph.Items[0].TaxRates[0] != "txr_item":
		t.Errorf("phase params %+v do not keep the current phase's settings", ph)
	}
	empty := &stripe.SubscriptionSchedulePhaseParams{}
	keepSettings(empty, nil)
	if !reflect.DeepEqual(empty, &stripe.SubscriptionSchedulePhaseParams{}) {
		t.Errorf("no current phase: %+v, want nothing added", empty)
	}
}

// TestStripeMockPhaseSettings: the settings keepSettings sends are
// parameters Stripe's API accepts on a phase (stripe-mock checks them
// against Stripe's OpenAPI description).
func TestStripeMockPhaseSettings(t *testing.T) {
	t.Parallel()
	base := testenv.StripeMock(t)
	cm := stripe.SubscriptionCollectionMethodChargeAutomatically
	current := &stripe.SubscriptionSchedulePhase{
		DefaultTaxRates:      []*stripe.TaxRate{{ID: "txr_vat"}},
		Discounts:            []*stripe.SubscriptionSchedulePhaseDiscount{{Coupon: &stripe.Coupon{ID: "co_10"}}},
		DefaultPaymentMethod: &stripe.PaymentMethod{ID: "pm_card"},
		CollectionMethod:     &cm,
		Items:                []*stripe.SubscriptionSchedulePhaseItem{{TaxRates: []*stripe.TaxRate{{ID: "txr_item"}}}},
		InvoiceSettings:      &stripe.SubscriptionSchedulePhaseInvoiceSettings{AccountTaxIDs: []*stripe.TaxID{{ID: "txi_1"}}},
	}
	ph := &stripe.SubscriptionSchedulePhaseParams{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(pricePro),
		Quantity: stripe.Int64(1)}}, Iterations: stripe.Int64(1)}
	keepSettings(ph, current)
	api := client.New("sk_test_123", &stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend,
		&stripe.BackendConfig{URL: stripe.String(base), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})})
	if _, err := api.SubscriptionSchedules.Update("sub_sched_123", &stripe.SubscriptionScheduleParams{
		Phases: []*stripe.SubscriptionSchedulePhaseParams{ph}}); err != nil {
		t.Fatalf("stripe-mock refused the phase's settings: %v", err)
	}
	// Automatic tax (Stripe Tax) with invoice terms, in place of tax rates.
	sendInvoice := stripe.SubscriptionCollectionMethodSendInvoice
	taxed := &stripe.SubscriptionSchedulePhaseParams{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{
		Price: stripe.String(pricePro), Quantity: stripe.Int64(1)}}, Iterations: stripe.Int64(1)}
	keepSettings(taxed, &stripe.SubscriptionSchedulePhase{CollectionMethod: &sendInvoice,
		AutomaticTax:    &stripe.SubscriptionAutomaticTax{Enabled: true, Liability: &stripe.SubscriptionAutomaticTaxLiability{Type: "self"}},
		InvoiceSettings: &stripe.SubscriptionSchedulePhaseInvoiceSettings{DaysUntilDue: 30}})
	if _, err := api.SubscriptionSchedules.Update("sub_sched_123", &stripe.SubscriptionScheduleParams{
		Phases: []*stripe.SubscriptionSchedulePhaseParams{taxed}}); err != nil {
		t.Fatalf("stripe-mock refused automatic tax and invoice terms: %v", err)
	}
}

// TestKeepReadBackRateLimitedIsUnknown: a keep's release is made, then the
// read of the subscription after it gets Stripe's 429: the answer is an
// unknown outcome (billing settles it from Stripe), never a rate limit,
// which billing takes for "nothing was made".
func TestKeepReadBackRateLimitedIsUnknown(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	env.scheduleStarter(t)
	attached := env.read(t).Schedule
	keep := env.keep("cfm_2", attached)
	env.fake.Pacer().LimitNext(stripepaytest.GetSubscription, stripepaytest.RateLimit)
	_, err := env.p.ApplyPlanChange(context.Background(), keep, "k2")
	assertKind(t, err, billing.ErrUnavailable)
	if errors.Is(err, billing.ErrRateLimited) {
		t.Errorf("%v is a rate limit: billing would take it for nothing made", err)
	}
	if s, _ := env.fake.Schedule(attached.ID); s.Status != "released" {
		t.Fatalf("schedule %s, want released", s.Status)
	}
}

// TestStaleAttachedScheduleIsRefused: the attached schedule was read before
// the renewal moved it into its next phase; phases made from that read
// would rewrite the current one. Nothing is sent: a definite refusal.
func TestStaleAttachedScheduleIsRefused(t *testing.T) {
	t.Parallel()
	env := newScheduleEnv(t)
	env.scheduleStarter(t)
	stale := env.read(t).Schedule
	env.fake.AdvanceClock(30*24*time.Hour + time.Hour) // the renewal: Starter from now on
	change := env.atPeriodEnd(priceFree, "cfm_2")
	change.Attached = stale
	before := env.fake.RequestCount(stripepaytest.UpdateSchedule)
	_, err := env.p.ApplyPlanChange(context.Background(), change, "k2")
	assertKind(t, err, billing.ErrProviderRejected)
	if env.fake.RequestCount(stripepaytest.UpdateSchedule) != before {
		t.Error("phases were sent over a schedule that changed since it was read")
	}
}

// TestScheduleWithMoreFutureChangesIsOpaque: a schedule made elsewhere
// with two future phases changes more than billingd states.
func TestScheduleWithMoreFutureChangesIsOpaque(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	phase := func(from time.Time, price string) *stripe.SubscriptionSchedulePhase {
		return &stripe.SubscriptionSchedulePhase{StartDate: from.Unix(), EndDate: from.AddDate(0, 1, 0).Unix(),
			Items: []*stripe.SubscriptionSchedulePhaseItem{{Price: &stripe.Price{ID: price}, Quantity: 1}}}
	}
	sch := &stripe.SubscriptionSchedule{ID: "sub_sched_x", Status: stripe.SubscriptionScheduleStatusActive,
		EndBehavior:  stripe.SubscriptionScheduleEndBehaviorRelease,
		CurrentPhase: &stripe.SubscriptionScheduleCurrentPhase{StartDate: start.Unix(), EndDate: start.AddDate(0, 1, 0).Unix()},
		Phases:       []*stripe.SubscriptionSchedulePhase{phase(start, pricePro), phase(start.AddDate(0, 1, 0), priceStarter)}}
	if got := scheduleOf(sch); got.Opaque || got.NextPriceID != priceStarter {
		t.Fatalf("one future phase: %+v, want a plain change to Starter", got)
	}
	sch.Phases = append(sch.Phases, phase(start.AddDate(0, 2, 0), priceFree))
	if got := scheduleOf(sch); !got.Opaque {
		t.Errorf("two future phases: %+v, want opaque", got)
	}
	sch.Phases = sch.Phases[:2]
	sch.Phases[1].TrialEnd = start.AddDate(0, 1, 7).Unix()
	if got := scheduleOf(sch); !got.Opaque {
		t.Errorf("a trial in the next phase: %+v, want opaque", got)
	}
}

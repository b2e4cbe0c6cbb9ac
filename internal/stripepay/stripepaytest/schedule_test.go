package stripepaytest_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// periodEnd is the end of the first period of newEnv's subscription.
var periodEnd = start.Add(30 * 24 * time.Hour)

// fromSubscription creates a schedule for e's subscription through
// stripe-go.
func (e env) fromSubscription(t *testing.T) *stripe.SubscriptionSchedule {
	t.Helper()
	sch, err := e.stripeAPI().SubscriptionSchedules.New(&stripe.SubscriptionScheduleParams{
		FromSubscription: stripe.String(e.org.SubscriptionID),
	})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	return sch
}

// downgradeAtPeriodEnd is billingd's update: the current period on from,
// then one period on to; released at the end.
func downgradeAtPeriodEnd(from, to string) *stripe.SubscriptionScheduleParams {
	return &stripe.SubscriptionScheduleParams{
		Phases: []*stripe.SubscriptionSchedulePhaseParams{
			{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(from), Quantity: stripe.Int64(1)}},
				StartDate: stripe.Int64(start.Unix()), EndDate: stripe.Int64(periodEnd.Unix())},
			{Items: []*stripe.SubscriptionSchedulePhaseItemParams{{Price: stripe.String(to), Quantity: stripe.Int64(1)}},
				Iterations: stripe.Int64(1)},
		},
		EndBehavior:       stripe.String("release"),
		ProrationBehavior: stripe.String("none"),
		Metadata:          map[string]string{stripepay.MetadataConfirmationID: "cfm_1"},
	}
}

// TestScheduleFromSubscription: Stripe's create from_subscription makes an
// active schedule with one phase, the subscription's current period and
// items, released at its end; the subscription names it.
func TestScheduleFromSubscription(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	sch := e.fromSubscription(t)
	if sch.Object != "subscription_schedule" || sch.Status != stripe.SubscriptionScheduleStatusActive ||
		sch.EndBehavior != stripe.SubscriptionScheduleEndBehaviorRelease ||
		sch.Subscription == nil || sch.Subscription.ID != e.org.SubscriptionID ||
		sch.Customer == nil || sch.Customer.ID != e.org.CustomerID {
		t.Errorf("schedule %+v", sch)
	}
	if sch.CurrentPhase == nil || sch.CurrentPhase.StartDate != start.Unix() || sch.CurrentPhase.EndDate != periodEnd.Unix() {
		t.Errorf("current phase %+v, want the subscription's period", sch.CurrentPhase)
	}
	if len(sch.Phases) != 1 || sch.Phases[0].StartDate != start.Unix() || sch.Phases[0].EndDate != periodEnd.Unix() ||
		len(sch.Phases[0].Items) != 1 || sch.Phases[0].Items[0].Price.ID != pricePro || sch.Phases[0].Items[0].Quantity != 1 {
		t.Errorf("phases %+v", sch.Phases)
	}

	sub, err := e.stripeAPI().Subscriptions.Get(e.org.SubscriptionID, &stripe.SubscriptionParams{
		Expand: []*string{stripe.String("schedule"), stripe.String("latest_invoice")}})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Schedule == nil || sub.Schedule.ID != sch.ID || sub.Schedule.Status != stripe.SubscriptionScheduleStatusActive ||
		sub.Schedule.CurrentPhase == nil {
		t.Errorf("expanded schedule %+v, want %s, active", sub.Schedule, sch.ID)
	}
	plain, err := e.stripeAPI().Subscriptions.Get(e.org.SubscriptionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Schedule == nil || plain.Schedule.ID != sch.ID || plain.Schedule.Status != "" {
		t.Errorf("unexpanded schedule %+v, want its id only", plain.Schedule)
	}
	if got := e.eventTypes(); !slices.Contains(got, "subscription_schedule.created") {
		t.Errorf("events %v, want subscription_schedule.created", got)
	}
}

// TestScheduleUpdatePhases: billingd's update sets two phases, end
// behaviour and metadata; the subscription is unchanged until the period
// ends.
func TestScheduleUpdatePhases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	sch := e.fromSubscription(t)
	params := downgradeAtPeriodEnd(pricePro, priceScale)
	params.AddExpand("subscription")
	got, err := e.stripeAPI().SubscriptionSchedules.Update(sch.ID, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Phases) != 2 || got.Phases[1].StartDate != periodEnd.Unix() ||
		got.Phases[1].EndDate != periodEnd.Add(30*24*time.Hour).Unix() || got.Phases[1].Items[0].Price.ID != priceScale {
		t.Errorf("phases %+v", got.Phases)
	}
	if got.Metadata[stripepay.MetadataConfirmationID] != "cfm_1" || got.CurrentPhase.EndDate != periodEnd.Unix() {
		t.Errorf("schedule %+v", got)
	}
	if got.Subscription == nil || got.Subscription.Status != stripe.SubscriptionStatusActive {
		t.Errorf("expanded subscription %+v, want active", got.Subscription)
	}
	if p := e.price(t); p != pricePro {
		t.Errorf("price %s before the period's end, want %s", p, pricePro)
	}
	// Metadata merges as Stripe's does: "" removes a key.
	got, err = e.stripeAPI().SubscriptionSchedules.Update(sch.ID, &stripe.SubscriptionScheduleParams{
		Metadata: map[string]string{stripepay.MetadataConfirmationID: "", "other": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Phases) != 2 || len(got.Metadata) != 1 || got.Metadata["other"] != "x" {
		t.Errorf("after a metadata update: %d phases, metadata %v", len(got.Phases), got.Metadata)
	}
}

// TestScheduleReleaseAndCancel: release leaves the subscription as it is
// and detaches it; cancel cancels the subscription; neither works twice.
func TestScheduleReleaseAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	sch := e.fromSubscription(t)
	if _, err := api.SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceScale)); err != nil {
		t.Fatal(err)
	}
	released, err := api.SubscriptionSchedules.Release(sch.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if released.Status != stripe.SubscriptionScheduleStatusReleased || released.ReleasedAt != start.Unix() ||
		released.Subscription != nil || released.ReleasedSubscription == nil ||
		released.ReleasedSubscription.ID != e.org.SubscriptionID || released.CurrentPhase != nil {
		t.Errorf("released %+v", released)
	}
	sub, _ := e.fake.Subscription(e.org.SubscriptionID)
	if sub.Schedule != "" || sub.Status != "active" || sub.Items[0].PriceID != pricePro {
		t.Errorf("subscription after release %+v", sub)
	}
	_, err = api.SubscriptionSchedules.Release(sch.ID, nil)
	wantStripeError(t, err, 400, "")
	_, err = api.SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceScale))
	wantStripeError(t, err, 400, "")
	_, err = api.SubscriptionSchedules.Cancel(sch.ID, nil)
	wantStripeError(t, err, 400, "")
	got, err := api.SubscriptionSchedules.Get(sch.ID, nil)
	if err != nil || got.Status != stripe.SubscriptionScheduleStatusReleased {
		t.Errorf("get released: %+v, %v", got, err)
	}

	// A released subscription can get a new schedule; canceling it
	// cancels the subscription.
	again := e.fromSubscription(t)
	canceled, err := api.SubscriptionSchedules.Cancel(again.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if canceled.Status != stripe.SubscriptionScheduleStatusCanceled || canceled.CanceledAt != start.Unix() {
		t.Errorf("canceled %+v", canceled)
	}
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); sub.Status != "canceled" {
		t.Errorf("subscription status %s after canceling its schedule, want canceled", sub.Status)
	}
	want := []string{"subscription_schedule.created", "subscription_schedule.updated", "subscription_schedule.released",
		"subscription_schedule.created", "customer.subscription.deleted", "subscription_schedule.canceled"}
	if got := e.eventTypes()[1:]; !slices.Equal(got, want) { // [0]: the subscription's creation
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestScheduleErrors: what Stripe refuses.
func TestScheduleErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.SetPrice("price_eur", 1900, "eur")
	e.fake.AdvanceClock(time.Hour) // "now" is no longer the period's start
	api := e.stripeAPI()
	sch := e.fromSubscription(t)

	_, err := api.SubscriptionSchedules.New(&stripe.SubscriptionScheduleParams{FromSubscription: stripe.String(e.org.SubscriptionID)})
	wantStripeError(t, err, 400, "") // already attached to a schedule
	_, err = api.SubscriptionSchedules.New(&stripe.SubscriptionScheduleParams{FromSubscription: stripe.String("sub_nope")})
	wantStripeError(t, err, 400, stripe.ErrorCodeResourceMissing)
	_, err = api.SubscriptionSchedules.Get("sub_sched_nope", nil)
	wantStripeError(t, err, 404, stripe.ErrorCodeResourceMissing)

	with := downgradeAtPeriodEnd(pricePro, priceScale)
	with.FromSubscription = stripe.String(e.org.SubscriptionID)
	with.Metadata = nil
	_, err = api.SubscriptionSchedules.New(with)
	wantStripeError(t, err, 400, "parameter_invalid") // from_subscription with phases

	tests := []struct {
		name string
		edit func(*stripe.SubscriptionScheduleParams)
	}{
		{"current phase's start moved", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[0].StartDate = stripe.Int64(start.Add(time.Hour).Unix())
		}},
		{"current phase starts now", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[0].StartDate, p.Phases[0].StartDateNow = nil, stripe.Bool(true)
		}},
		{"phases not contiguous", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[1].StartDate = stripe.Int64(periodEnd.Add(24 * time.Hour).Unix())
		}},
		{"no end on a phase but the last", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[0].EndDate = nil
		}},
		{"end_date and iterations", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[1].EndDate = stripe.Int64(periodEnd.Add(60 * 24 * time.Hour).Unix())
		}},
		{"unknown price", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[1].Items[0].Price = stripe.String("price_nope")
		}},
		{"another currency", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[1].Items[0].Price = stripe.String("price_eur")
		}},
		{"current phase's price changed, prorated", func(p *stripe.SubscriptionScheduleParams) {
			p.Phases[0].Items[0].Price = stripe.String(priceScale)
			p.ProrationBehavior = nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := downgradeAtPeriodEnd(pricePro, priceScale)
			tt.edit(params)
			if _, err := api.SubscriptionSchedules.Update(sch.ID, params); err == nil {
				t.Error("accepted")
			}
		})
	}
	got, _ := e.fake.Schedule(sch.ID)
	if len(got.Phases) != 1 || len(got.Metadata) != 0 {
		t.Errorf("refused updates changed the schedule: %+v", got)
	}
}

// TestScheduleCreateReplayed: a create retried with its idempotency key
// gets the first answer, and makes no second schedule.
func TestScheduleCreateReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	form := url.Values{"from_subscription": {e.org.SubscriptionID}}
	r1, b1 := e.post(t, "/v1/subscription_schedules", "k1", form)
	r2, b2 := e.post(t, "/v1/subscription_schedules", "k1", form)
	if r1.StatusCode != 200 || r2.StatusCode != 200 || r2.Header.Get("Idempotent-Replayed") != "true" || string(b1) != string(b2) {
		t.Fatalf("%d %s\nthen %d %s", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	n := 0
	for _, typ := range e.eventTypes() {
		if typ == "subscription_schedule.created" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d schedules created, want 1", n)
	}
	// Another key is another request: refused, the subscription has one.
	if r3, b3 := e.post(t, "/v1/subscription_schedules", "k2", form); r3.StatusCode != 400 || errorType(t, b3) != "invalid_request_error" {
		t.Errorf("a second schedule: %d %s, want 400 invalid_request_error", r3.StatusCode, b3)
	}
	// A refusal found while executing is saved under its key, as Stripe does.
	if r4, _ := e.post(t, "/v1/subscription_schedules", "k2", form); r4.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("the refusal was not replayed")
	}
}

// TestAdvanceClockAppliesPhase: at the period's end the schedule's next
// phase sets the price and the renewal invoice charges it, through
// Stripe's invoice rules; after the last phase the schedule is released
// and the subscription renews as it is. The preview with
// proration_behavior none, made before, quoted that renewal invoice.
//
// Scale at 4900 with a 20% coupon and 10% exclusive tax, $5.00 of credit:
// discount 980, tax 10% of 3920 = 392, total 4312, due 4312 − 500 = 3812.
func TestAdvanceClockAppliesPhase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	e.fake.SetCustomerDiscount(e.org.CustomerID, stripepaytest.Coupon{PercentOff: 20})
	e.fake.SetTaxRate(e.org.SubscriptionID, stripepaytest.TaxRate{Percentage: 10})
	e.fake.SetCustomerBalance(e.org.CustomerID, -500)

	preview, err := api.Invoices.CreatePreview(&stripe.InvoiceCreatePreviewParams{
		Customer: stripe.String(e.org.CustomerID), Subscription: stripe.String(e.org.SubscriptionID),
		SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
			Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
				ID: stripe.String(e.org.ItemID), Price: stripe.String(priceScale)}},
			ProrationBehavior: stripe.String("none"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if preview.BillingReason != stripe.InvoiceBillingReasonUpcoming || len(preview.Lines.Data) != 1 ||
		preview.Lines.Data[0].Proration || preview.Lines.Data[0].Period.Start != periodEnd.Unix() ||
		preview.Lines.Data[0].Amount != 4900 {
		t.Errorf("preview %+v, lines %+v", preview, preview.Lines.Data)
	}
	if preview.Subtotal != 4900 || preview.Total != 4312 || preview.AmountDue != 3812 || preview.StartingBalance != -500 {
		t.Errorf("preview subtotal %d total %d due %d balance %d, want 4900 4312 3812 -500",
			preview.Subtotal, preview.Total, preview.AmountDue, preview.StartingBalance)
	}

	sch := e.fromSubscription(t)
	if _, err := api.SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceScale)); err != nil {
		t.Fatal(err)
	}
	events := len(e.fake.Events())
	e.fake.AdvanceClock(29 * 24 * time.Hour)
	if len(e.fake.Events()) != events || e.price(t) != pricePro {
		t.Fatal("something renewed before the period's end")
	}

	e.fake.AdvanceClock(24 * time.Hour) // the period's end
	sub, err := api.Subscriptions.Get(e.org.SubscriptionID, &stripe.SubscriptionParams{
		Expand: []*string{stripe.String("schedule"), stripe.String("latest_invoice")}})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Items.Data[0].Price.ID != priceScale || sub.Items.Data[0].ID != e.org.ItemID ||
		sub.CurrentPeriodStart != periodEnd.Unix() || sub.CurrentPeriodEnd != periodEnd.Add(30*24*time.Hour).Unix() {
		t.Errorf("renewed subscription: item %+v, period %d–%d", sub.Items.Data[0], sub.CurrentPeriodStart, sub.CurrentPeriodEnd)
	}
	if sub.Schedule == nil || sub.Schedule.Status != stripe.SubscriptionScheduleStatusActive ||
		sub.Schedule.CurrentPhase.StartDate != periodEnd.Unix() {
		t.Errorf("schedule %+v, want active in its second phase", sub.Schedule)
	}
	inv := sub.LatestInvoice
	if inv == nil || inv.BillingReason != stripe.InvoiceBillingReasonSubscriptionCycle ||
		inv.Subtotal != preview.Subtotal || inv.Total != preview.Total || inv.AmountDue != preview.AmountDue ||
		inv.SubscriptionDetails == nil || inv.SubscriptionDetails.Metadata["org_id"] != "org_1" {
		t.Errorf("renewal invoice %+v, want the preview's amounts", inv)
	}
	if got := e.fake.CustomerBalance(e.org.CustomerID); got != 0 {
		t.Errorf("balance %d after the renewal, want the credit used", got)
	}
	want := []string{"subscription_schedule.updated", "invoice.created", "customer.subscription.updated"}
	if got := e.eventTypes()[events:]; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	var invEvent struct {
		Data struct {
			Object struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"object"`
		} `json:"data"`
	}
	all := e.fake.Events()
	if err := json.Unmarshal(all[events+1].Payload, &invEvent); err != nil || invEvent.Data.Object.ID != inv.ID ||
		invEvent.Data.Object.Object != "invoice" {
		t.Errorf("invoice.created carries %+v (%v), want invoice %s", invEvent.Data.Object, err, inv.ID)
	}

	// The last phase ends: the schedule is released, the subscription
	// renews on Scale; no credit is left: 4312 due.
	events = len(e.fake.Events())
	e.fake.AdvanceClock(30 * 24 * time.Hour)
	got, _ := e.fake.Schedule(sch.ID)
	if got.Status != "released" || got.ReleasedSubscription != e.org.SubscriptionID || got.Subscription != "" ||
		!got.ReleasedAt.Equal(periodEnd.Add(30*24*time.Hour)) {
		t.Errorf("schedule after its last phase: %+v", got)
	}
	after, _ := e.fake.Subscription(e.org.SubscriptionID)
	if after.Schedule != "" || after.Items[0].PriceID != priceScale {
		t.Errorf("subscription after release %+v", after)
	}
	if due, _, _ := e.fake.Invoice(after.LatestInvoice); due != 4312 {
		t.Errorf("second renewal due %d, want 4312", due)
	}
	want = []string{"subscription_schedule.released", "invoice.created", "customer.subscription.updated"}
	if got := e.eventTypes()[events:]; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}

	// Far ahead: one renewal per period, each with its invoice.
	events = len(e.fake.Events())
	e.fake.AdvanceClock(95 * 24 * time.Hour)
	if got := e.eventTypes()[events:]; len(got) != 6 {
		t.Errorf("%d events over three periods: %v, want 6", len(got), got)
	}
	if sub, _ := e.fake.Subscription(e.org.SubscriptionID); !sub.CurrentPeriodEnd.Equal(periodEnd.Add(5 * 30 * 24 * time.Hour)) {
		t.Errorf("period end %v after five renewals", sub.CurrentPeriodEnd)
	}
}

// TestScheduleStateRestore: billingd dev keeps schedules across restarts.
func TestScheduleStateRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	sch := e.fromSubscription(t)
	if _, err := e.stripeAPI().SubscriptionSchedules.Update(sch.ID, downgradeAtPeriodEnd(pricePro, priceScale)); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(e.fake.State())
	if err != nil {
		t.Fatal(err)
	}
	var st stripepaytest.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return start })
	fake.SetPrice(pricePro, 1900, "usd")
	fake.SetPrice(priceScale, 4900, "usd")
	fake.Restore(st)
	got, ok := fake.Schedule(sch.ID)
	if !ok || got.Status != "active" || len(got.Phases) != 2 || got.Metadata[stripepay.MetadataConfirmationID] != "cfm_1" {
		t.Fatalf("restored schedule %+v, %v", got, ok)
	}
	fake.AdvanceClock(30 * 24 * time.Hour)
	if sub, _ := fake.Subscription(e.org.SubscriptionID); sub.Items[0].PriceID != priceScale || sub.Schedule != sch.ID {
		t.Errorf("restored subscription after its period: %+v", sub)
	}
}

func (e env) eventTypes() []string {
	var types []string
	for _, ev := range e.fake.Events() {
		types = append(types, ev.Type)
	}
	return types
}

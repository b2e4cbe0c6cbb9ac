package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// Downgrades at the period's end (contract §6), against the Stripe fake's
// subscription schedules and test clock.

// periodEndResult is the body of a second call that scheduled a change.
type periodEndResult struct {
	OK           bool                     `json:"ok"`
	Subscription billing.SubscriptionView `json:"subscription"`
	Receipt      string                   `json:"receipt"`
}

func (h *harness) proposeAt(token, op, to, at string) proposal {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, map[string]string{"to": to, "at": at})
	if r.Status != http.StatusAccepted {
		h.t.Fatalf("first call %s to %s at %s: status %d: %s", op, to, at, r.Status, r.Body)
	}
	var p proposal
	r.decode(h.t, &p)
	return p
}

func (h *harness) confirmAt(token, op, to, at, confirmToken string) periodEndResult {
	h.t.Helper()
	r := h.do("POST", "/api/billing/"+op, token, map[string]string{"to": to, "at": at, "confirm_token": confirmToken})
	wantStatus(h.t, r, http.StatusOK, "")
	var res periodEndResult
	r.decode(h.t, &res)
	return res
}

func (h *harness) subscriptionView(token string) billing.SubscriptionView {
	h.t.Helper()
	r := h.do("GET", "/api/billing/subscription", token, nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var sub billing.SubscriptionView
	r.decode(h.t, &sub)
	return sub
}

// TestPeriodEndDowngradeScheduledKeptAndApplied: a downgrade at the
// period's end is quoted from Stripe's renewal preview (with a coupon and
// tax, by Stripe's rules), scheduled as a subscription schedule with the
// subscription unchanged, shown by GET subscription, kept (a handshake that
// releases the schedule), scheduled again, and applied by Stripe's renewal
// under its test clock; billingd learns of it from the webhooks, records
// when it applied, and its receipt is the one signed when it was scheduled.
func TestPeriodEndDowngradeScheduledKeptAndApplied(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	acct := h.createOrg("later", "Later Ltd", "scale")
	subID := acct.Subscription.StripeSubscriptionID
	h.fake.SetCustomerDiscount(acct.Org.StripeCustomerID, stripepaytest.Coupon{PercentOff: 10})
	h.fake.SetTaxRate(subID, stripepaytest.TaxRate{Percentage: 20})
	tok := h.user("later", "lee")
	before := h.subscriptionView(tok)
	periodEnd, err := time.Parse(time.RFC3339, before.CurrentPeriodEnd.Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}

	p := h.proposeAt(tok, "downgrade", "pro", "period_end")
	d := p.Details
	// Stripe's renewal at Pro: 1900, 10% off (190), 20% tax on 1710 (342).
	want := billing.Amounts{SubtotalCents: 1900, DiscountCents: 190, TaxCents: 342, AmountDueCents: 2052}
	if d.At != "period_end" || d.AmountDueNowCents != 0 || !d.EffectiveAt.Equal(periodEnd) || d.NextCharge == nil || *d.NextCharge != want {
		t.Fatalf("details = %+v, next charge %+v; want nothing now and %+v at %s", d, d.NextCharge, want, periodEnd)
	}
	day := periodEnd.Format("Jan 2, 2006")
	if !strings.Contains(p.Summary, "at the end of the current period. Nothing changes or is charged now; on "+day+
		" the plan becomes Pro and $19.00 plus $3.42 tax, less a $1.90 discount: $20.52 will be charged then.") {
		t.Fatalf("summary %q does not state the date and what is charged then", p.Summary)
	}

	done := h.confirmAt(tok, "downgrade", "pro", "period_end", p.ConfirmToken)
	sc := done.Subscription.ScheduledChange
	if done.Subscription.Plan != "scale" || sc == nil || sc.To != "pro" || !sc.At.Equal(periodEnd) || sc.ConfirmationID != p.ConfirmationID {
		t.Fatalf("second call's subscription = %+v (scheduled %+v); want Scale with Pro scheduled", done.Subscription, sc)
	}
	claims, err := receipt.Verify(done.Receipt, h.receiptKeys())
	if err != nil {
		t.Fatalf("receipt: %v", err)
	}
	if claims.At != "period_end" || claims.EffectiveAt == nil || !claims.EffectiveAt.Equal(periodEnd) || claims.AmountDueNowCents == nil || *claims.AmountDueNowCents != 0 ||
		claims.To != "pro" {
		t.Fatalf("receipt claims %+v: want the scheduled change, effective %s, nothing charged now", claims, periodEnd)
	}
	fakeSub, _ := h.fake.Subscription(subID)
	if fakeSub.Items[0].PriceID != "price_billingd_scale" || fakeSub.Schedule == "" {
		t.Fatalf("at Stripe: %+v; want Scale with a schedule attached", fakeSub)
	}
	h.wantStripeChanges(acct, 0)
	if got := h.subscriptionView(tok).ScheduledChange; got == nil || got.To != "pro" {
		t.Fatalf("GET subscription shows scheduled change %+v", got)
	}

	// Keep Scale: a handshake of its own, which releases the schedule.
	keep := h.propose(tok, "upgrade", "scale")
	if !strings.HasPrefix(keep.Summary, "Keep Scale: cancel the change to Pro scheduled for "+day+".") ||
		keep.Details.CancelsScheduledChange == nil {
		t.Fatalf("keep proposal: %q %+v", keep.Summary, keep.Details)
	}
	r := h.confirm(tok, "upgrade", "scale", keep.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	if got := h.subscriptionView(tok); got.Plan != "scale" || got.ScheduledChange != nil {
		t.Fatalf("after keeping: %+v", got)
	}
	if fakeSub, _ := h.fake.Subscription(subID); fakeSub.Schedule != "" {
		t.Fatalf("the schedule is still attached at Stripe: %s", fakeSub.Schedule)
	}

	// Scheduled again, then Stripe's renewal applies it.
	delivered := len(h.fake.Events())
	again := h.proposeAt(tok, "downgrade", "pro", "period_end")
	h.confirmAt(tok, "downgrade", "pro", "period_end", again.ConfirmToken)
	h.fake.AdvanceClock(time.Until(periodEnd) + time.Hour)
	// The events of the scheduling and of the renewal (schedule created and
	// updated, subscription updated, invoice), newest first, each twice: an
	// event is only a hint; billingd reads Stripe.
	renewal := slices.Clone(h.fake.Events()[delivered:])
	slices.Reverse(renewal)
	for _, ev := range append(renewal, renewal...) {
		wantStatus(t, h.deliver(ev), http.StatusOK, "")
	}
	after := h.subscriptionView(tok)
	if after.Plan != "pro" || after.ScheduledChange != nil || !after.CurrentPeriodEnd.After(periodEnd) {
		t.Fatalf("after the renewal billingd shows %+v; want Pro for the next period", after)
	}
	events := h.auditEvents("later")
	i := slices.IndexFunc(events, func(e billing.AuditEvent) bool { return e.Event == billing.EventScheduledChangeApplied })
	if i < 0 || events[i].ConfirmationID != again.ConfirmationID || events[i].Principal != "lee" {
		t.Fatalf("audit %v: want SCHEDULED_CHANGE_APPLIED of %s", eventNames(events), again.ConfirmationID)
	}
	rr := h.do("GET", "/api/billing/confirmations/"+again.ConfirmationID+"/receipt", tok, nil)
	wantStatus(t, rr, http.StatusOK, "")
}

// TestScheduledChangeAppliesWithoutWebhooks: no webhook arrives (none
// configured, or lost); the settler reads back subscriptions whose
// scheduled change is due and records Stripe's renewal.
func TestScheduledChangeAppliesWithoutWebhooks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("quiet", "Quiet Co", "scale")
	tok := h.user("quiet", "qi")
	p := h.proposeAt(tok, "downgrade", "free", "period_end")
	done := h.confirmAt(tok, "downgrade", "free", "period_end", p.ConfirmToken)
	periodEnd := done.Subscription.ScheduledChange.At
	h.fake.AdvanceClock(time.Until(periodEnd) + time.Hour)

	// The settler's grace is SETTLE_INTERVAL; the database's clock has not
	// moved, so the row is made due by moving its date back.
	h.exec(t, `UPDATE subscriptions SET scheduled = jsonb_set(scheduled, '{at}', to_jsonb(now() - interval '1 hour'))
		WHERE org = 'quiet'`)
	if n := h.app.SyncScheduledOnce(context.Background()); n != 1 {
		t.Fatalf("SyncScheduledOnce looked at %d subscriptions, want 1", n)
	}
	if got := h.subscriptionView(tok); got.Plan != "free" || got.ScheduledChange != nil {
		t.Fatalf("after the sync: %+v; want Free", got)
	}
	_ = acct
}

// TestScheduleMadeInStripesDashboardIsDrift: a schedule attached in
// Stripe's dashboard between the two calls, without a webhook, voids the
// token: the second call finds it at Stripe.
func TestScheduleMadeInStripesDashboardIsDrift(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("dash", "Dash Inc", "scale")
	tok := h.user("dash", "di")
	p := h.proposeAt(tok, "downgrade", "pro", "period_end")
	h.scheduleInDashboard(acct.Subscription.StripeSubscriptionID, "price_billingd_free")
	r := h.do("POST", "/api/billing/downgrade", tok, map[string]string{"to": "pro", "at": "period_end", "confirm_token": p.ConfirmToken})
	wantStatus(t, r, http.StatusConflict, "consent_token_mismatch")
	if sc := h.subscriptionView(tok).ScheduledChange; sc == nil || sc.To != "free" || sc.ConfirmationID != "" {
		t.Fatalf("billingd shows scheduled change %+v; Stripe has a move to free", sc)
	}
}

func (h *harness) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := h.db.Pool.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// scheduleInDashboard attaches a schedule moving the subscription to price
// at its period's end, as someone in Stripe's dashboard would: straight at
// the fake's API, with no webhook delivered.
func (h *harness) scheduleInDashboard(subscriptionID, price string) {
	h.t.Helper()
	var created struct {
		ID     string `json:"id"`
		Phases []struct {
			StartDate int64 `json:"start_date"`
			EndDate   int64 `json:"end_date"`
			Items     []struct {
				Price any `json:"price"`
			} `json:"items"`
		} `json:"phases"`
	}
	h.stripeForm("/v1/subscription_schedules", url.Values{"from_subscription": {subscriptionID}}, &created)
	if len(created.Phases) != 1 {
		h.t.Fatalf("schedule created with %d phases", len(created.Phases))
	}
	sub, _ := h.fake.Subscription(subscriptionID)
	ph := created.Phases[0]
	h.stripeForm("/v1/subscription_schedules/"+created.ID, url.Values{
		"phases[0][items][0][price]": {sub.Items[0].PriceID},
		"phases[0][start_date]":      {strconv.FormatInt(ph.StartDate, 10)},
		"phases[0][end_date]":        {strconv.FormatInt(ph.EndDate, 10)},
		"phases[1][items][0][price]": {price},
		"phases[1][iterations]":      {"1"},
	}, nil)
}

// stripeForm posts form to the Stripe fake and decodes its answer into out.
func (h *harness) stripeForm(path string, form url.Values, out any) {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.env["STRIPE_API_BASE"]+path, strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer sk_test_dashboard")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestPeriodEndDowngradeOverMCP: downgrade_plan takes "at" like REST; the
// second call answers the subscription unchanged with its scheduled change,
// and get_subscription shows it, in the structured result and in the text.
func TestPeriodEndDowngradeOverMCP(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createOrg("agentic", "Agentic", "scale")
	cs := mcpConnect(t, h.url, h.mcpToken("agentic", "ada", "claude-desktop", auth.ScopeRead, auth.ScopeWrite), "")

	// upgrade_plan takes no period_end.
	wantToolError(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "at": "period_end"}), "invalid_request")

	var p proposal
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "at": "period_end"}), &p)
	if p.Details.At != "period_end" || p.Details.AmountDueNowCents != 0 || p.Details.NextCharge == nil {
		t.Fatalf("proposal details %+v", p.Details)
	}
	// The second call must repeat "at": without it, it is another change.
	wantToolError(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "confirm_token": p.ConfirmToken}),
		"consent_token_mismatch")
	p = proposal{}
	wantSuccess(t, callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "at": "period_end"}), &p)
	var done periodEndResult
	res := callTool(t, cs, "downgrade_plan", map[string]any{"to": "pro", "at": "period_end", "confirm_token": p.ConfirmToken})
	wantSuccess(t, res, &done)
	if done.Subscription.Plan != "scale" || done.Subscription.ScheduledChange == nil || done.Subscription.ScheduledChange.To != "pro" {
		t.Fatalf("second call: %+v", done.Subscription)
	}
	if !strings.HasPrefix(texts(res)[0], "Scheduled: the subscription stays on the scale plan") {
		t.Fatalf("second call's text %q does not say the change is scheduled", texts(res)[0])
	}
	var sub billing.SubscriptionView
	sres := callTool(t, cs, "get_subscription", map[string]any{})
	wantSuccess(t, sres, &sub)
	if sub.ScheduledChange == nil || sub.ScheduledChange.ConfirmationID != p.ConfirmationID ||
		!strings.Contains(texts(sres)[0], "A change to the pro plan is scheduled for") {
		t.Fatalf("get_subscription: %+v, %q", sub, texts(sres)[0])
	}
}

// schedulesOf returns the fake's schedules made for subscriptionID, oldest
// first, released ones included.
func (h *harness) schedulesOf(subscriptionID string) []stripepaytest.Schedule {
	var out []stripepaytest.Schedule
	for _, sch := range h.fake.State().Schedules {
		if sch.Subscription == subscriptionID || sch.ReleasedSubscription == subscriptionID {
			out = append(out, sch)
		}
	}
	return out
}

// TestPeriodEndAnswerLostOrHalfMade: a schedule's change is settled like any
// other (a crash forgets nothing). Its phases applied with the answer lost:
// the retry finds the schedule's metadata naming the confirmation and
// records it, once. Its phases refused with a 500 after the schedule was
// created (Stripe replays the 500 for that key): the settler finds the
// bare schedule, sends the phases under the next attempt's key onto that
// same schedule, and never leaves a second one. A keep whose release
// answer was lost: the retry finds nothing scheduled and records it.
func TestPeriodEndAnswerLostOrHalfMade(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("SETTLE_INTERVAL", "200ms"))

	t.Run("phases applied, answer lost", func(t *testing.T) {
		acct := h.createOrg("lostphase", "Lost Phase", "scale")
		tok := h.user("lostphase", "lp")
		p := h.proposeAt(tok, "downgrade", "pro", "period_end")
		h.fake.FailNextAt(stripepaytest.UpdateSchedule, stripepaytest.LoseResponse)
		r := h.do("POST", "/api/billing/downgrade", tok, map[string]string{"to": "pro", "at": "period_end", "confirm_token": p.ConfirmToken})
		wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
		done := h.confirmAt(tok, "downgrade", "pro", "period_end", p.ConfirmToken)
		if sc := done.Subscription.ScheduledChange; sc == nil || sc.ConfirmationID != p.ConfirmationID {
			t.Fatalf("retry: %+v", done.Subscription)
		}
		if n := len(h.schedulesOf(acct.Subscription.StripeSubscriptionID)); n != 1 {
			t.Fatalf("%d schedules at Stripe, want 1", n)
		}
		wantEvents(t, h.auditEvents("lostphase"),
			"TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_FAILED:outcome_unknown", "OPERATION_EXECUTED")
	})

	t.Run("schedule created, phases refused", func(t *testing.T) {
		acct := h.createOrg("halfmade", "Half Made", "scale")
		tok := h.user("halfmade", "hm")
		p := h.proposeAt(tok, "downgrade", "free", "period_end")
		h.fake.FailNextAt(stripepaytest.UpdateSchedule, stripepaytest.ServerError)
		r := h.do("POST", "/api/billing/downgrade", tok, map[string]string{"to": "free", "at": "period_end", "confirm_token": p.ConfirmToken})
		wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
		// Nobody retries: the settler finishes it.
		deadline := time.Now().Add(15 * time.Second)
		for h.subscriptionView(tok).ScheduledChange == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if sc := h.subscriptionView(tok).ScheduledChange; sc == nil || sc.To != "free" || sc.ConfirmationID != p.ConfirmationID {
			t.Fatalf("after settling: scheduled %+v", sc)
		}
		schedules := h.schedulesOf(acct.Subscription.StripeSubscriptionID)
		if len(schedules) != 1 || schedules[0].Status != "active" || len(schedules[0].Phases) != 2 {
			t.Fatalf("schedules at Stripe: %+v; want one, with the two phases", schedules)
		}
	})

	t.Run("keep released, answer lost", func(t *testing.T) {
		acct := h.createOrg("lostkeep", "Lost Keep", "scale")
		tok := h.user("lostkeep", "lk")
		p := h.proposeAt(tok, "downgrade", "pro", "period_end")
		h.confirmAt(tok, "downgrade", "pro", "period_end", p.ConfirmToken)
		keep := h.propose(tok, "upgrade", "scale")
		h.fake.FailNextAt(stripepaytest.ReleaseSchedule, stripepaytest.LoseResponse)
		wantStatus(t, h.confirm(tok, "upgrade", "scale", keep.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
		wantStatus(t, h.confirm(tok, "upgrade", "scale", keep.ConfirmToken), http.StatusOK, "")
		if sc := h.subscriptionView(tok).ScheduledChange; sc != nil {
			t.Fatalf("after the retry: still scheduled %+v", sc)
		}
		if sub, _ := h.fake.Subscription(acct.Subscription.StripeSubscriptionID); sub.Schedule != "" ||
			sub.Items[0].PriceID != "price_billingd_scale" {
			t.Fatalf("at Stripe: %+v", sub)
		}
	})
}

// TestDeclinedChangeAfterTheRelease: an upgrade made while a downgrade is
// scheduled releases the schedule first (so the period's end cannot undo
// the upgrade); the card is then declined. Nothing is charged, the plan
// stays, and the released downgrade is scheduled again (the person agreed
// to cancel it only as part of the upgrade): the answer says it stands,
// and billingd shows it as Stripe has it, on a new schedule named by the
// confirmation that first scheduled it.
func TestDeclinedChangeAfterTheRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.createOrg("declined", "Declined Co", "pro")
	tok := h.user("declined", "dc")
	p := h.proposeAt(tok, "downgrade", "free", "period_end")
	h.confirmAt(tok, "downgrade", "free", "period_end", p.ConfirmToken)
	up := h.propose(tok, "upgrade", "scale")
	if !strings.Contains(up.Summary, "This cancels the change to Free scheduled for") {
		t.Fatalf("summary %q", up.Summary)
	}
	h.fake.FailNextAt(stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
	r := h.confirm(tok, "upgrade", "scale", up.ConfirmToken)
	wantStatus(t, r, http.StatusPaymentRequired, "payment_failed")
	if !strings.Contains(string(r.Body), "the change to Free scheduled for") || !strings.Contains(string(r.Body), "stays scheduled") {
		t.Fatalf("answer %s does not say the scheduled change stands", r.Body)
	}
	got := h.subscriptionView(tok)
	if got.Plan != "pro" || got.ScheduledChange == nil || got.ScheduledChange.To != "free" ||
		got.ScheduledChange.ConfirmationID != p.ConfirmationID {
		t.Fatalf("billingd shows %+v (scheduled %+v); want Pro with Free scheduled again", got, got.ScheduledChange)
	}
	sub, _ := h.fake.Subscription(acct.Subscription.StripeSubscriptionID)
	sch, ok := h.fake.Schedule(sub.Schedule)
	if sub.Items[0].PriceID != "price_billingd_pro" || !ok || sch.Status != "active" || len(sch.Phases) != 2 ||
		sch.Phases[1].Items[0].PriceID != "price_billingd_free" {
		t.Fatalf("at Stripe: %+v, schedule %+v", sub, sch)
	}
	h.wantStripeChanges(acct, 0)
}

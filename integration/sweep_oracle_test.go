package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The sweep's oracle: one judge of every case's end state and of every
// answer given during it (docs/guarantees.md states it):
//
//  1. Stripe's subscription (price, schedule) equals billingd's (plan,
//     scheduled_change).
//  2. Every change Stripe made has exactly one OPERATION_EXECUTED and one
//     receipt, whose amount is that change's own invoice (or says it is
//     unknown); nothing else has one.
//  3. Nothing reached Stripe without consent that held when it was sent.
//  4. A scheduled change disappears only when a change that cancels it was
//     made (or the renewal applied it).
//  5. Every answer was true when given: "nothing was changed" / "not made"
//     only if Stripe has no such change; a quote only from the
//     subscription as it then was, with its amount written in Stripe's
//     digits (the sweep's catalog is in KWD: thousandths); no advice to
//     retry with a token the caller does not hold.
//  6. Every unknown outcome is settled within SETTLE_INTERVAL plus a bound,
//     even while another row fails on every try (sweep.settle, sweep.poison).
//  7. The changes Stripe made under a standing mandate stay within its
//     bounds (max_changes, budget_cents, max_amount_due_cents), and each
//     executed one says so (consent mandate, naming it) in its receipt.

// sweepConfirmation is a confirmation as the database has it.
type sweepConfirmation struct {
	id, status, operation, from, to string
	atPeriodEnd, cancels            bool
	created                         time.Time
	sent, finished                  *time.Time
}

func (c sweepConfirmation) keep() bool { return c.from == c.to }

// judge applies the oracle to a settled case.
func (sw *sweep) judge(sc *sweepCase) {
	cfms := sw.confirmations(sc.org)
	made := sw.madeAtStripe(sc, cfms)
	if d := sw.disagreement(sc); d != "" {
		sc.violate(1, "%s", d)
	}
	sw.judgeRecords(sc, cfms, made)
	sw.judgeConsent(sc, cfms)
	sw.judgeScheduled(sc, cfms)
	sw.judgeAnswers(sc, cfms, made)
	sw.judgeMandates(sc, made)
}

// judgeMandates is oracle 7.
func (sw *sweep) judgeMandates(sc *sweepCase, made map[string]stripepaytest.Made) {
	type bounds struct {
		id                  string
		maxAmount, budget   int64
		maxChanges, changes int
		spent               int64
	}
	var mandates []bounds
	spentBy := map[string]string{} // confirmation → mandate, by the recorded consent
	amounts := map[string]int64{}
	sw.query(func(ctx context.Context) error {
		mandates, spentBy, amounts = nil, map[string]string{}, map[string]int64{}
		rows, err := sw.h.db.Pool.Query(ctx, `SELECT id, max_amount_due_cents, budget_cents, max_changes FROM mandates WHERE org = $1`, sc.org)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b bounds
			if err := rows.Scan(&b.id, &b.maxAmount, &b.budget, &b.maxChanges); err != nil {
				rows.Close()
				return err
			}
			mandates = append(mandates, b)
		}
		rows.Close()
		rows, err = sw.h.db.Pool.Query(ctx, `SELECT id, mandate_id, amount_due_cents FROM confirmations
			WHERE org = $1 AND mandate_id IS NOT NULL`, sc.org)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, mandate string
			var amount int64
			if err := rows.Scan(&id, &mandate, &amount); err != nil {
				return err
			}
			spentBy[id], amounts[id] = mandate, amount
		}
		return rows.Err()
	})
	for i := range mandates {
		b := &mandates[i]
		for id := range made {
			if spentBy[id] != b.id {
				continue
			}
			b.changes++
			b.spent += amounts[id]
			if amounts[id] > b.maxAmount {
				sc.violate(7, "%s charged %d under mandate %s, whose per-change bound is %d", id, amounts[id], b.id, b.maxAmount)
			}
			if receipt := sw.receipt(id); !strings.Contains(jwsPayload(receipt), `"mandate_id":"`+b.id+`"`) {
				sc.violate(7, "the receipt of %s, made under mandate %s, does not name it", id, b.id)
			}
		}
		if b.changes > b.maxChanges || b.spent > b.budget {
			sc.violate(7, "Stripe made %d changes (%d spent) under mandate %s: at most %d changes, %d budget",
				b.changes, b.spent, b.id, b.maxChanges, b.budget)
		}
	}
}

// jwsPayload is the JSON payload of a compact JWS ("" if none).
func jwsPayload(jws string) string {
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	return string(payload)
}

// disagreement says how billingd's subscription differs from Stripe's; ""
// when they agree.
func (sw *sweep) disagreement(sc *sweepCase) string {
	sub, _ := sw.h.fake.Subscription(sc.sub)
	stripePlan, stripeScheduled := planOfPrice(sub.Items[0].PriceID), sw.scheduledAtStripe(sc.sub)
	view := sw.view(sc)
	scheduled := ""
	if v := view.ScheduledChange; v != nil {
		scheduled = v.To + " at " + v.At.UTC().Format(time.RFC3339)
	}
	if view.Plan != stripePlan || scheduled != stripeScheduled {
		return fmt.Sprintf("billingd shows %s (scheduled: %q), Stripe %s (scheduled: %q)", view.Plan, scheduled,
			stripePlan, stripeScheduled)
	}
	return ""
}

// view is the subscription as billingd shows it, asked again while a
// connection that PostgreSQL's restart cut is replaced (503).
func (sw *sweep) view(sc *sweepCase) billing.SubscriptionView {
	var r response
	for try := 0; try < 10; try++ {
		if r = sw.h.do("GET", "/api/billing/subscription", sc.payer, nil); r.Status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantStatus(sw.t, r, http.StatusOK, "")
	var view billing.SubscriptionView
	r.decode(sw.t, &view)
	return view
}

// scheduledAtStripe is the change the subscription's schedule will make,
// "plan at time", or "" for none.
func (sw *sweep) scheduledAtStripe(subscriptionID string) string {
	sub, _ := sw.h.fake.Subscription(subscriptionID)
	if s := sw.h.scheduledAtStripe(sub); s != "none" {
		return s
	}
	return ""
}

// confirmations lists the org's confirmations.
func (sw *sweep) confirmations(org string) []sweepConfirmation {
	var out []sweepConfirmation
	sw.query(func(ctx context.Context) error {
		out = nil
		rows, err := sw.h.db.Pool.Query(ctx, `SELECT id, status, operation, from_plan, to_plan,
				at_period_end, cancels IS NOT NULL, created_at, sent_at, finished_at
			FROM confirmations WHERE org = $1 ORDER BY created_at`, org)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c sweepConfirmation
			if err := rows.Scan(&c.id, &c.status, &c.operation, &c.from, &c.to, &c.atPeriodEnd, &c.cancels, &c.created,
				&c.sent, &c.finished); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	return out
}

// query runs fn on the test's pool, again while PostgreSQL's restart cuts
// its connections one by one.
func (sw *sweep) query(fn func(context.Context) error) {
	var err error
	for try := 0; try < 20; try++ {
		if err = fn(context.Background()); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	sw.t.Fatal(err)
}

// madeAtStripe maps each confirmation whose change Stripe made to the
// request that made it: an update (a change now) or the phases of a
// schedule (at the period's end) under one of its attempts' keys, or, for
// a keep, the release of the schedule while the subscription was on the
// plan kept (a release after the renewal made the scheduled change, or
// after a change in Stripe's dashboard, keeps nothing). A keep whose
// read-back finds a price changed in Stripe's dashboard is not judged
// made: Stripe's answers do not tell whether the dashboard's change came
// before the release or after it, and billingd says the plan was not kept
// and the scheduled change is gone, which holds either way.
func (sw *sweep) madeAtStripe(sc *sweepCase, cfms []sweepConfirmation) map[string]stripepaytest.Made {
	made := map[string]stripepaytest.Made{}
	for _, m := range sw.h.fake.MadeFor(sc.sub) {
		for _, c := range cfms {
			suffix, ok := keyOf(m.Key, c.id)
			if !ok {
				continue
			}
			switch {
			case m.Endpoint == stripepaytest.UpdateSubscription && suffix == "",
				m.Endpoint == stripepaytest.UpdateSchedule && suffix == ":phases",
				m.Endpoint == stripepaytest.ReleaseSchedule && c.keep() && strings.HasPrefix(suffix, ":release:") &&
					planOfPrice(m.PriceID) == c.to && !sc.dashboard:
				if _, seen := made[c.id]; !seen { // the first: since then the change exists
					made[c.id] = m
				}
			}
		}
	}
	return made
}

var attemptSuffix = regexp.MustCompile(`^(-[0-9]+)?(:.*)?$`)

// keyOf reports whether key is one of confirmation id's idempotency keys
// ("billingd-<id>", "-<attempt>", then a step's ":suffix"), and its suffix.
func keyOf(key, id string) (suffix string, ok bool) {
	rest, found := strings.CutPrefix(key, "billingd-"+id)
	if !found {
		return "", false
	}
	m := attemptSuffix.FindStringSubmatch(rest)
	if m == nil {
		return "", false
	}
	return m[2], true
}

// judgeRecords is oracle 2.
func (sw *sweep) judgeRecords(sc *sweepCase, cfms []sweepConfirmation, made map[string]stripepaytest.Made) {
	executed := map[string]int{}
	for _, e := range sw.h.auditEvents(sc.org) {
		if e.Event == billing.EventOperationExecuted {
			executed[e.ConfirmationID]++
		}
	}
	for _, c := range cfms {
		m, wasMade := made[c.id]
		if c.keep() && sc.dashboard {
			// Stripe's answers do not tell whether the dashboard's change
			// came before the keep's release or after it (madeAtStripe):
			// either record is true.
			wasMade = c.status == "executed"
		}
		switch {
		case wasMade && c.status != "executed":
			sc.violate(2, "Stripe made the change of %s (%s→%s); billingd records it %s", c.id, c.from, c.to, c.status)
		case !wasMade && c.status == "executed":
			sc.violate(2, "billingd records %s (%s→%s) executed; Stripe made no such change", c.id, c.from, c.to)
		}
		want := 0
		if c.status == "executed" {
			want = 1
		}
		if executed[c.id] != want {
			sc.violate(2, "%s (%s) has %d OPERATION_EXECUTED, want %d", c.id, c.status, executed[c.id], want)
		}
		receipt := sw.receipt(c.id)
		switch {
		case c.status == "executed" && receipt == "":
			sc.violate(2, "executed %s has no receipt", c.id)
		case c.status != "executed" && receipt != "":
			sc.violate(2, "%s (%s) has a receipt", c.id, c.status)
		case receipt != "" && wasMade && m.Endpoint == stripepaytest.UpdateSubscription && c.operation == "upgrade_plan":
			sw.judgeReceiptAmount(sc, c, m, receipt)
		}
	}
}

// judgeReceiptAmount: an upgrade's receipt states the amount of the
// invoice its own update made, or says it is unknown.
func (sw *sweep) judgeReceiptAmount(sc *sweepCase, c sweepConfirmation, m stripepaytest.Made, receipt string) {
	var claims struct {
		AmountDueNowCents int64  `json:"amount_due_now_cents"`
		InvoiceID         string `json:"invoice_id"`
		Unknown           bool   `json:"amount_invoiced_unknown"`
	}
	parts := strings.Split(receipt, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[min(1, len(parts)-1)])
	if err != nil || json.Unmarshal(payload, &claims) != nil {
		sc.violate(2, "receipt of %s is not a JWS with claims", c.id)
		return
	}
	if claims.Unknown {
		return
	}
	amount, _, ok := sw.h.fake.Invoice(m.LatestInvoice)
	switch {
	case !ok:
		sc.violate(2, "receipt of %s states %d as invoiced; the update made no invoice", c.id, claims.AmountDueNowCents)
	case claims.InvoiceID != "" && claims.InvoiceID != m.LatestInvoice:
		sc.violate(2, "receipt of %s names invoice %s; the change's own is %s", c.id, claims.InvoiceID, m.LatestInvoice)
	case claims.AmountDueNowCents != amount:
		sc.violate(2, "receipt of %s states %d; the change's own invoice is %d", c.id, claims.AmountDueNowCents, amount)
	}
}

func (sw *sweep) receipt(id string) string {
	var r string
	sw.query(func(ctx context.Context) error {
		return sw.h.db.Pool.QueryRow(ctx, `SELECT coalesce(max(receipt), '') FROM receipts WHERE confirmation_id = $1`, id).Scan(&r)
	})
	return r
}

// sentAfterDecision: the steps from which a change's consent was decided
// for the request that follows (the policy once more right before the
// send, or the settler's consentHolds): a policy that turns there cannot
// stop that request, only every later one.
var sentAfterDecision = map[string]bool{
	"second_call/send": true, "second_call/record": true, "second_call/commit": true,
	"settle/read_back": true, "settle/resend": true, "settle/commit": true,
	"period_end/release": true, "period_end/schedule_create": true, "period_end/phases": true,
	"period_end/keep": true, "period_end/restore": true,
}

// judgeConsent is oracle 3: once the policy denies every change, no request
// reaches Stripe but the one whose consent was decided before.
func (sw *sweep) judgeConsent(sc *sweepCase, cfms []sweepConfirmation) {
	if sc.deniedAt.IsZero() {
		return
	}
	inFlight := sentAfterDecision[sc.step.String()]
	for _, m := range sw.h.fake.MadeFor(sc.sub) {
		// Putting back a released scheduled change (":restore-<n>-<t>:schedule",
		// ":…:phases") undoes a change not made: it needs no consent.
		if !m.At.After(sc.deniedAt) || strings.Contains(m.Key, ":restore") {
			continue
		}
		for _, c := range cfms {
			if _, ok := keyOf(m.Key, c.id); ok && !(inFlight && m.At.Before(sc.deniedAt.Add(sweepStripeTimeout))) {
				sc.violate(3, "%s reached Stripe (%s) for %s after the policy denied every change", m.Endpoint, m.Key, c.id)
			}
		}
	}
}

// judgeScheduled is oracle 4.
func (sw *sweep) judgeScheduled(sc *sweepCase, cfms []sweepConfirmation) {
	if sc.scheduledBefore == "" || sc.dashboard || sw.scheduledAtStripe(sc.sub) == sc.scheduledBefore {
		return
	}
	if sc.renewed {
		// The renewal applied it; or it passed while the change was
		// released (Stripe down across the period's end): a date gone
		// cannot be scheduled again, and billingd says so rather than
		// make a change now that nobody agreed to.
		return
	}
	for _, c := range cfms {
		if c.status == "executed" && c.cancels {
			return
		}
	}
	sc.violate(4, "the change scheduled (%s) is gone at Stripe, and no change that cancels it was made", sc.scheduledBefore)
}

// notMade are the words of an answer saying a change was not made.
var notMade = regexp.MustCompile(`(?i)nothing was changed|not made|nothing was sent`)

// judgeAnswers is oracle 5.
func (sw *sweep) judgeAnswers(sc *sweepCase, cfms []sweepConfirmation, made map[string]stripepaytest.Made) {
	sc.mu.Lock()
	answers := append([]sweepAnswer(nil), sc.answers...)
	sc.mu.Unlock()
	for _, a := range answers {
		body := string(a.body)
		if a.status >= 400 && a.confirmation != "" && notMade.MatchString(body) {
			if m, ok := made[a.confirmation]; ok && m.At.Before(a.at) {
				sc.violate(5, "the %s call was answered %d %q; Stripe had made the change", a.who, a.status, body)
			}
		}
		if a.status >= 400 && a.confirmation != "" && strings.Contains(body, "nothing was changed") {
			// Not even the first step of the change, the release of the
			// scheduled change it cancels, may have been made at Stripe by
			// then. (A schedule made from the subscription, whose phases
			// are not set yet, changes nothing.)
			for _, m := range sw.h.fake.MadeFor(sc.sub) {
				if suffix, ok := keyOf(m.Key, a.confirmation); ok && m.At.Before(a.at) &&
					(suffix == "" || strings.HasPrefix(suffix, ":release:") || suffix == ":phases") {
					sc.violate(5, "the %s call was answered %q; Stripe had made %s (%s)", a.who, body, m.Endpoint, m.Key)
				}
			}
		}
		if !a.tokenHeld && strings.Contains(body, "same token") {
			sc.violate(5, "the %s call, which holds no token, was told to retry with the same token: %q", a.who, body)
		}
		if a.status == http.StatusAccepted {
			sw.judgeQuote(sc, a, cfms)
		}
	}
}

// judgeQuote: a quote is made from the subscription as it then was:
// Stripe's plan when it was answered (unless Stripe's dashboard or the
// renewal moved it, which billingd learns later), and never while
// another change of the subscription was in flight.
func (sw *sweep) judgeQuote(sc *sweepCase, a sweepAnswer, cfms []sweepConfirmation) {
	var p proposal
	if json.Unmarshal(a.body, &p) != nil || p.ConfirmationID == "" {
		return
	}
	if due := p.Details.AmountDueNowCents; due > 0 {
		// Stripe counts KWD in thousandths: 17420 is 17.420 KWD.
		written := fmt.Sprintf("%d.%03d KWD", due/1000, due%1000)
		if p.Details.Exponent != 3 || !strings.Contains(p.Summary, written) {
			sc.violate(5, "the %s call's summary %q does not state %d fils as %s (currency_exponent %d)", a.who,
				p.Summary, due, written, p.Details.Exponent)
		}
	}
	if !sc.dashboard && !sc.renewed && p.Details.From != a.stripePlan && p.Details.From != p.Details.To {
		sc.violate(5, "the %s call quoted a change from %s while Stripe was on %s", a.who, p.Details.From, a.stripePlan)
	}
	var quoted *sweepConfirmation
	for i := range cfms {
		if cfms[i].id == p.ConfirmationID {
			quoted = &cfms[i]
		}
	}
	if quoted == nil {
		return
	}
	for _, c := range cfms {
		if c.id != quoted.id && c.sent != nil && !c.sent.After(quoted.created) &&
			(c.finished == nil || c.finished.After(quoted.created)) {
			sc.violate(5, "the %s call quoted %s while %s was in flight", a.who, quoted.id, c.id)
		}
	}
}

// signedWebhook is ev as Stripe delivers it, signed with the test secret.
func signedWebhook(ev stripepaytest.Event) *http.Request {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: ev.Payload, Secret: webhookSecret, Timestamp: time.Now()})
	req, _ := http.NewRequest("POST", "/webhooks/stripe", bytes.NewReader(ev.Payload))
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// roundTripQuiet sends req to h (its path on h.url) and ignores the
// answer: a delivery that fails is delivered again later.
func (h *harness) roundTripQuiet(req *http.Request) {
	u := h.url + req.URL.Path
	out, err := http.NewRequest(req.Method, u, req.Body)
	if err != nil {
		return
	}
	out.Header = req.Header
	client := &http.Client{Timeout: 10 * time.Second}
	if resp, err := client.Do(out); err == nil {
		resp.Body.Close()
	}
}

// sweepReplica is a billingd serve process of the sweep, restarted at once
// on the same address whenever it dies.
type sweepReplica struct {
	url string
}

func startSweepReplica(t *testing.T, h *harness, bin, addr string) *sweepReplica {
	r := &sweepReplica{url: "http://" + addr}
	srv, err := h.launchServe(bin, addr)
	if err != nil {
		t.Fatal(err)
	}
	// The test's context ends before any cleanup runs (the kills of the
	// processes included): from then on a replica that dies stays dead,
	// and the cleanup waits for this watcher, which never reports after
	// the test is over.
	stop := t.Context().Done()
	watching := make(chan struct{})
	t.Cleanup(func() { <-watching })
	go func() {
		defer close(watching)
		for {
			select {
			case <-srv.done:
			case <-stop:
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			next, err := h.launchServe(bin, addr)
			if err != nil {
				select {
				case <-stop: // the test ended while it restarted
				default:
					t.Errorf("restart billingd at %s: %v", addr, err)
				}
				return
			}
			srv = next
		}
	}()
	return r
}

// waitReady waits until the replica answers /readyz.
func (r *sweepReplica) waitReady(t *testing.T) {
	t.Helper()
	if err := untilReady(r.url + "/readyz"); err != nil {
		t.Fatal(err)
	}
}

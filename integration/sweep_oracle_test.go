package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The sweep's oracle: one judge of every case's end state and of every
// answer given during it (docs/guarantees.md states it). It judges from
// evidence billingd cannot write (sweep_evidence_test.go): the Stripe
// fake's log of every write and read, every answer a caller got, and the
// consents the test gave. billingd's records are a second witness that
// must agree (rule 2), never the judge.
//
//  1. Stripe's subscription (price, schedule) equals billingd's (plan,
//     scheduled_change): on the path, before any late webhook makes
//     billingd read Stripe again, and after it.
//  2. billingd's records agree with Stripe: a change is recorded executed,
//     with one OPERATION_EXECUTED and one receipt, exactly when Stripe
//     made all of it.
//  3. Each Stripe write is explained by exactly one consent that held when
//     it was sent, from the state the person was shown to the state they
//     agreed to; no consent produced two writes of one change.
//  4. A scheduled change disappears only when a change that cancels it
//     was made (or the renewal applied it).
//  5. Every answer was true when given, tokenless ones included: "not
//     made" / "nothing was changed" only if Stripe has no such change,
//     then or later; "executed" only with the change made and Stripe
//     showing what the answer says; a quote only from the subscription as
//     it then was, with its amount written in Stripe's digits (the sweep's
//     catalog is in KWD: thousandths), never while a change was running
//     at Stripe; no advice to retry with a token the caller does not hold;
//     every receipt a person can fetch states the invoice Stripe made for
//     that change (a downgrade's too), or says it is unknown only when
//     billingd could not know it.
//  6. Every unknown outcome is settled within SETTLE_INTERVAL plus a bound,
//     even while another row fails on every try (sweep.settle, sweep.poison).
//  7. The changes Stripe made under a standing mandate stay within its
//     bounds as the person granted them (max_changes, budget_cents,
//     max_amount_due_cents), counted from Stripe's writes, and each
//     receipt names the mandate.
//  8. billingd stops waiting for Stripe at STRIPE_TIMEOUT: no write of its
//     was answered to it more than twice that after it reached Stripe
//     (the fake logs writes only, a preview among them).

// sweepConfirmation is a confirmation as the database has it: the second
// witness.
type sweepConfirmation struct {
	id, status, from, to string
	created              time.Time
	sent, finished       *time.Time
}

// judge applies the oracle to a settled case.
func (sw *sweep) judge(sc *sweepCase) {
	for _, why := range sw.explain(sc) {
		sc.violate(3, "%s", why)
	}
	sw.judgeDuplicates(sc)
	if d := sw.disagreement(sc); d != "" {
		sc.violate(1, "%s", d)
	}
	sw.judgeRecords(sc, "")
	sw.judgeScheduled(sc)
	sw.judgeEnds(sc)
	sw.judgeAnswers(sc)
	sw.judgeReceipts(sc)
	sw.judgeQuotedAmounts(sc)
	sw.judgeMandates(sc)
	sw.judgeWaits(sc)
}

// judgeWaits is rule 8. A write Stripe answered while billingd was still
// waiting, longer after it arrived than billingd's bound allows, shows a
// call without that bound. "Stripe stalls" holds a write 2.5 ×
// STRIPE_TIMEOUT whatever the client does: billingd must have hung up
// 1.5 × STRIPE_TIMEOUT before the fake answers, time enough for the fake
// to see it go on a loaded machine. The limit, twice STRIPE_TIMEOUT, lets
// an answer the fake sends just after the deadline pass ("Stripe timeout"
// holds one 1.5 ×, until the client goes). Setup writes are judged too:
// billingd made them. Stripe's own writes (dashboard, renewal) were
// answered to no one and have no Replied.
func (sw *sweep) judgeWaits(sc *sweepCase) {
	for _, w := range sw.h.fake.WritesFor(sc.sub) {
		if w.Replied.IsZero() {
			continue
		}
		if waited := w.Replied.Sub(w.Arrived); waited > 2*sweepStripeTimeout {
			sc.violate(8, "billingd waited %v for Stripe's answer to %s (%s: arrived %s, executed %s, answered %s); STRIPE_TIMEOUT is %v",
				waited.Round(time.Millisecond), w.Endpoint, w.Key, w.Arrived.Format("15:04:05.000"),
				w.At.Format("15:04:05.000"), w.Replied.Format("15:04:05.000"), sweepStripeTimeout)
		}
	}
}

// judgeQuotedAmounts is rule 5 for what a person agreed to pay: the amount
// due now that a proposal stated is what Stripe invoiced for the change
// (plus what a fault added after the quote: a tax rate that changed), unless
// the renewal came between them.
func (sw *sweep) judgeQuotedAmounts(sc *sweepCase) {
	for _, why := range sw.misquoted(sc) {
		sc.violate(5, "%s", why)
	}
}

// misquoted lists the changes Stripe invoiced at another amount than the
// one the person agreed to, now or on the next invoice: what a write
// prorated onto the next invoice is the credit the summary stated (a
// charge carried there was never stated).
func (sw *sweep) misquoted(sc *sweepCase) (wrong []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.renewed {
		return nil
	}
	for _, c := range sc.consents {
		shown, ok := sc.shown[c.confirmation]
		if c.kind != "token" || !ok {
			continue
		}
		var moved bool              // a write of c changed what c agreed to change
		var carried, credited int64 // what c's writes prorated onto the next invoice and credited
		var last stripepaytest.Write
		for _, w := range c.writes {
			// A write from another price than the one quoted is the
			// dashboard's race (rule 3): what was invoiced then is what the
			// receipt must say, and it does (judgeReceiptAmount).
			if planOfPrice(w.Before.PriceID) != c.from.plan || w.Before.Quantity != c.from.seats {
				continue
			}
			b, a := stateAtStripe(w.Before), stateAtStripe(w.After)
			moved = moved || b.plan != a.plan || b.seats != a.seats || b.ends != a.ends
			carried, credited, last = carried+w.Carried, credited+w.Credited, w
			if w.Invoice == "" {
				continue
			}
			amount, _, _ := sw.h.fake.Invoice(w.Invoice)
			if quoted := shown.Details.AmountDueNowCents; amount != quoted && amount != quoted+sc.adjusted {
				wrong = append(wrong, fmt.Sprintf("%s was quoted %d due now; Stripe invoiced %d (%s)", c, quoted, amount, w.Invoice))
			}
		}
		if moved && !creditAsStated(shown.Details, carried, credited, last.At) {
			wrong = append(wrong, fmt.Sprintf("%s stated a credit of %d; Stripe carried %d to the next invoice and credited %d to the balance",
				c, shown.Details.CreditCents, carried, credited))
		}
	}
	return wrong
}

// creditAsStated reports whether a consent's writes (the last made at at)
// credited what the proposal d stated: carried onto the next invoice,
// prorated at the quote's proration date, or, for a cancellation now (which Stripe prorates to the moment it is made,
// and the summary says "about ... as of now"), to the balance, at most
// what was stated and less by no more than the time since the quote.
func creditAsStated(d billing.Details, carried, credited int64, at time.Time) bool {
	if d.Cancellation != billing.CancelNow {
		return credited-carried == d.CreditCents
	}
	remaining := d.NextChargeAt.Sub(d.EffectiveAt).Seconds()
	elapsed := at.Sub(d.EffectiveAt).Seconds() + 1 // the quote's date is truncated to the second
	drift := int64(float64(d.CreditCents)*elapsed/remaining) + 2*d.QuantityFrom
	return carried == 0 && credited <= d.CreditCents && credited >= d.CreditCents-drift
}

// judgeDuplicates is rule 3's "no consent produced two writes" for the
// writes that change nothing Stripe's state shows but charge (the same
// price set again still makes an invoice): two updates of one confirmation
// that executed under different keys.
func (sw *sweep) judgeDuplicates(sc *sweepCase) {
	seen := map[string]string{} // confirmation and endpoint → the first key
	for _, w := range sw.caseWrites(sc) {
		id, ok := confirmationOfKey(w.Key)
		if !ok || w.Endpoint != stripepaytest.UpdateSubscription {
			// A schedule's requests may be made again by a new attempt once
			// a release was put back; rule 3 judges what they change.
			continue
		}
		at := id + " " + string(w.Endpoint)
		if first, dup := seen[at]; dup && first != w.Key {
			sc.violate(3, "%s executed twice for %s: under %s and %s", w.Endpoint, id, first, w.Key)
		}
		seen[at] = w.Key
	}
}

// confirmationOfKey is the confirmation an idempotency key of billingd's
// names ("billingd-<id>", then an attempt's "-<n>" and a step's ":…").
func confirmationOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "billingd-")
	if !ok {
		return "", false
	}
	rest, _, _ = strings.Cut(rest, ":")
	if i := strings.LastIndexByte(rest, '-'); i > 0 && strings.Trim(rest[i+1:], "0123456789") == "" && i < len(rest)-1 {
		rest = rest[:i]
	}
	return rest, true
}

// judgeMandates is oracle 7: the bounds as the test granted them, counted
// from Stripe's writes.
func (sw *sweep) judgeMandates(sc *sweepCase) {
	m := sc.mandate
	if m == nil {
		return
	}
	changes, spent := 0, int64(0)
	for _, c := range m.requests {
		for _, w := range c.writes {
			changes++
			if sc.dashboard {
				// A change from the price the dashboard set after billingd's
				// last read (rule 3's race) is invoiced from that price:
				// its amount is judged by its receipt.
				continue
			}
			amount, _, _ := sw.h.fake.Invoice(w.Invoice)
			spent += amount
			if amount > m.grant.MaxAmountDueCents {
				sc.violate(7, "Stripe charged %d for %s under the mandate, whose per-change bound is %d", amount, c, m.grant.MaxAmountDueCents)
			}
		}
		if len(c.writes) > 0 && c.confirmation != "" {
			if receipt, _ := sw.receiptShown(sc, c); receipt != "" && !strings.Contains(jwsPayload(receipt), `"mandate_id":"`+m.id+`"`) {
				sc.violate(7, "the receipt of %s, made under mandate %s, does not name it", c, m.id)
			}
		}
	}
	if changes > m.grant.MaxChanges || spent > m.grant.BudgetCents {
		sc.violate(7, "Stripe made %d changes (%d spent) under the mandate: at most %d changes, %d budget",
			changes, spent, m.grant.MaxChanges, m.grant.BudgetCents)
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
	stripe, view := sw.stripeNow(sub), sw.view(sc)
	shows := sweepState{plan: view.Plan, seats: view.Quantity, scheduled: scheduledShown(view.ScheduledChange, view.Quantity),
		ends: endsOf(view.Status, view.CancelAtPeriodEnd)}
	if shows != stripe {
		return fmt.Sprintf("billingd shows %s, Stripe %s", shows, stripe)
	}
	return ""
}

// scheduledShown is a scheduled change billingd shows, in the oracle's
// terms, on a subscription of n seats ("" for none).
func scheduledShown(v *billing.ScheduledChangeView, n int64) string {
	if v == nil {
		return ""
	}
	if v.Quantity > 0 { // a change of plan keeps the seats
		n = v.Quantity
	}
	return v.To + seatsSuffix(n) + "@" + v.At.UTC().Format(time.RFC3339)
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

// scheduledAtStripe is the change of plan or seats the subscription's
// schedule will make ("pro×5@<RFC 3339>"), or "" for none.
func (sw *sweep) scheduledAtStripe(subscriptionID string) string {
	sub, _ := sw.h.fake.Subscription(subscriptionID)
	return sw.stripeNow(sub).scheduled
}

// confirmations lists the org's confirmations.
func (sw *sweep) confirmations(org string) []sweepConfirmation {
	var out []sweepConfirmation
	sw.query(func(ctx context.Context) error {
		out = nil
		rows, err := sw.h.db.Pool.Query(ctx, `SELECT id, status, from_plan, to_plan, created_at, sent_at, finished_at
			FROM confirmations WHERE org = $1 ORDER BY created_at`, org)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c sweepConfirmation
			if err := rows.Scan(&c.id, &c.status, &c.from, &c.to, &c.created,
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

// judgeRecords is oracle 2: billingd's records, the second witness, agree
// with what Stripe did.
func (sw *sweep) judgeRecords(sc *sweepCase, when string) {
	executed := map[string]int{}
	for _, e := range sw.h.auditEvents(sc.org) {
		if e.Event == billing.EventOperationExecuted {
			executed[e.ConfirmationID]++
		}
	}
	writes := sw.caseWrites(sc)
	for _, c := range sw.confirmations(sc.org) {
		made, known := sw.madeByEvidence(sc, c.id, writes)
		switch {
		case !known || sw.ambiguous(sc, c.id):
		case made && c.status != "executed":
			sc.violate(2, "%sStripe made all of %s (%s→%s); billingd records it %s", when, c.id, c.from, c.to, c.status)
		case !made && c.status == "executed":
			sc.violate(2, "%sbillingd records %s (%s→%s) executed; Stripe did not make it", when, c.id, c.from, c.to)
		}
		want := 0
		if c.status == "executed" {
			want = 1
		}
		if executed[c.id] != want {
			sc.violate(2, "%s%s (%s) has %d OPERATION_EXECUTED, want %d", when, c.id, c.status, executed[c.id], want)
		}
		switch receipt := sw.receipt(c.id); {
		case c.status == "executed" && receipt == "":
			sc.violate(2, "%sexecuted %s has no receipt", when, c.id)
		case c.status != "executed" && receipt != "":
			sc.violate(2, "%s%s (%s) has a receipt", when, c.id, c.status)
		}
	}
}

// ambiguous reports whether the consent given to confirmation id is a keep
// whose outcome billingd cannot know (sweepConsent.ambiguous).
func (sw *sweep) ambiguous(sc *sweepCase, id string) bool {
	writes, reads := sw.caseWrites(sc), sw.h.fake.ReadsOf(sc.sub)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, c := range sc.consents {
		if c.confirmation == id && id != "" {
			return c.ambiguous(writes, reads)
		}
	}
	return false
}

// madeByEvidence says whether Stripe made all of confirmation id's change,
// from the consent given to it; known is false for a confirmation no
// consent of the test's names (one never sent, or an agent's request
// whose answer was lost: then the writes its key names decide).
func (sw *sweep) madeByEvidence(sc *sweepCase, id string, writes []stripepaytest.Write) (made, known bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, c := range sc.consents {
		if c.confirmation == id {
			return c.madeAll(), true
		}
	}
	for _, w := range writes {
		if _, ok := keyOf(w.Key, id); ok && w.Changed() {
			return true, false
		}
	}
	return false, false
}

// judgeReceipts: every receipt a person can fetch is of a change Stripe
// made, and states the invoice Stripe made for it (rule 5).
func (sw *sweep) judgeReceipts(sc *sweepCase) {
	sc.mu.Lock()
	consents := slices.Clone(sc.consents)
	sc.mu.Unlock()
	for _, c := range consents {
		if c.confirmation == "" {
			continue
		}
		receipt, status := sw.receiptShown(sc, c)
		switch {
		case status != http.StatusOK && status != http.StatusNotFound:
			sc.violate(5, "the receipt of %s answered %d", c, status)
		case receipt == "":
		case !c.madeAll():
			sc.violate(5, "%s has a receipt; Stripe did not make the change", c)
		default:
			sw.judgeReceiptAmount(sc, c, receipt)
		}
	}
}

// receiptShown is the receipt of c's change as its person fetches it.
func (sw *sweep) receiptShown(sc *sweepCase, c *sweepConsent) (string, int) {
	token := sc.payer
	if strings.HasPrefix(c.who, "other") {
		token = sc.other
	}
	var r response
	for try := 0; try < 10; try++ {
		if r = sw.h.do("GET", "/api/billing/confirmations/"+c.confirmation+"/receipt", token, nil); r.Status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var view billing.ReceiptView
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &view) != nil {
		return "", r.Status
	}
	return view.Receipt, r.Status
}

// judgeReceiptAmount: a receipt states the amount of the invoice its own
// change made (0 and no invoice for one that invoiced nothing: a change at
// the period's end, a keep; a downgrade's 0 with its credit), or says it is
// unknown — only when billingd could not know it: the write's answer was
// lost, or a later invoice made it ambiguous.
func (sw *sweep) judgeReceiptAmount(sc *sweepCase, c *sweepConsent, receipt string) {
	var claims struct {
		AmountDueNowCents *int64 `json:"amount_due_now_cents"`
		InvoiceID         string `json:"invoice_id"`
		Unknown           bool   `json:"amount_invoiced_unknown"`
		Credited          int64  `json:"credited_cents"`
	}
	if json.Unmarshal([]byte(jwsPayload(receipt)), &claims) != nil {
		sc.violate(5, "the receipt of %s is not a JWS with claims", c)
		return
	}
	var invoiced stripepaytest.Write // the write that invoiced, if any
	for _, w := range c.writes {
		if w.Invoice != "" {
			invoiced = w
		}
	}
	if claims.Unknown {
		couldNotKnow := false
		for _, w := range c.writes {
			couldNotKnow = couldNotKnow || !w.Answered || sw.invoicedAfter(sc, w)
		}
		if !couldNotKnow {
			sc.violate(5, "the receipt of %s says the amount is unknown; Stripe answered every request of it, and its invoice (%q) is the latest",
				c, invoiced.Invoice)
		}
		return
	}
	stated := int64(0)
	if claims.AmountDueNowCents != nil {
		stated = *claims.AmountDueNowCents
	}
	amount, _, _ := sw.h.fake.Invoice(invoiced.Invoice)
	switch {
	case claims.InvoiceID != invoiced.Invoice:
		sc.violate(5, "the receipt of %s names invoice %q; the change's own is %q", c, claims.InvoiceID, invoiced.Invoice)
	case stated != amount:
		sc.violate(5, "the receipt of %s states %d; the change's own invoice is %d", c, stated, amount)
	case claims.Credited != invoiced.Credited:
		sc.violate(5, "the receipt of %s states %d credited; the change's own invoice credited %d", c, claims.Credited, invoiced.Credited)
	}
}

// invoicedAfter reports whether another invoice of the subscription came
// after w's (a renewal, another change).
func (sw *sweep) invoicedAfter(sc *sweepCase, w stripepaytest.Write) bool {
	for _, later := range sw.caseWrites(sc) {
		if later.At.After(w.At) && (later.Invoice != "" || later.Endpoint == stripepaytest.Renewal) {
			return true
		}
	}
	return false
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

// judgeScheduled is oracle 4.
func (sw *sweep) judgeScheduled(sc *sweepCase) {
	if sc.scheduledBefore == "" || sc.dashboard || sc.renewed || sw.scheduledAtStripe(sc.sub) == sc.scheduledBefore {
		// The renewal applied it; or it passed while the change was
		// released (Stripe down across the period's end): a date gone
		// cannot be scheduled again, and billingd says so rather than
		// make a change now that nobody agreed to.
		return
	}
	sc.mu.Lock()
	cancelled := false
	for _, c := range sc.consents {
		cancelled = cancelled || c.from.scheduled == sc.scheduledBefore && c.madeAll()
	}
	sc.mu.Unlock()
	if !cancelled {
		sc.violate(4, "the change scheduled (%s) is gone at Stripe, and no change that cancels it was made", sc.scheduledBefore)
	}
}

// judgeEnds is oracle 4 for a pending cancellation: like a scheduled
// change, it disappears only when a change that replaces it was made.
func (sw *sweep) judgeEnds(sc *sweepCase) {
	sub, _ := sw.h.fake.Subscription(sc.sub)
	if sc.endsBefore != "period_end" || sc.dashboard || sc.renewed || sw.stripeNow(sub).ends == "period_end" {
		return
	}
	sc.mu.Lock()
	replaced := false
	for _, c := range sc.consents {
		replaced = replaced || c.from.ends == "period_end" && c.to.ends != "period_end" && c.madeAll()
	}
	sc.mu.Unlock()
	if !replaced {
		sc.violate(4, "the cancellation pending at the period's end is gone at Stripe, and no change that replaces it was made")
	}
}

// notMade are the words of an answer saying a change was not made.
var notMade = regexp.MustCompile(`(?i)nothing was changed|not made|nothing was sent`)

// judgeAnswers is oracle 5.
func (sw *sweep) judgeAnswers(sc *sweepCase) {
	sc.mu.Lock()
	answers := slices.Clone(sc.answers)
	sc.mu.Unlock()
	for _, a := range answers {
		body := string(a.body)
		c := a.consent
		if c != nil && sw.ambiguous(sc, c.confirmation) {
			continue
		}
		if c != nil && a.status >= 400 && notMade.MatchString(body) {
			sw.judgeNotMade(sc, a, c)
		}
		if c != nil && a.executed() {
			claims, _ := a.claims()
			shows := sweepState{plan: claims.Subscription.Plan, seats: claims.Subscription.Quantity,
				ends: endsOf(claims.Subscription.Status, claims.Subscription.CancelAtPeriodEnd)}
			if v := claims.Subscription.ScheduledChange; v != nil {
				seats := shows.seats // a change of plan keeps them
				if v.Quantity > 0 {
					seats = v.Quantity
				}
				shows.scheduled = v.To + seatsSuffix(seats) + "@" + v.At.UTC().Format(time.RFC3339)
			}
			switch {
			case !c.madeAll() && !(c.standing() && a.stripe.plan == c.to.plan):
				// (An agent's request under a standing consent that found
				// Stripe on the plan asked for already changed nothing.)
				sc.violate(5, "the %s call was answered %d %q; Stripe did not make all of %s", a.who, a.status, body, c)
			case !sw.movedByOthers(sc, c, a.at) && shows != a.stripe:
				sc.violate(5, "the %s call was answered that the subscription is %s; Stripe had %s", a.who, shows, a.stripe)
			}
		}
		if !a.tokenHeld && strings.Contains(body, "same token") {
			sc.violate(5, "the %s call, which holds no token, was told to retry with the same token: %q", a.who, body)
		}
		if a.status == http.StatusAccepted {
			sw.judgeQuote(sc, a)
		}
	}
}

// movedByOthers reports whether someone else (Stripe's dashboard, the
// renewal) changed the subscription after c's last write and before t: an
// answer about c's change cannot know of it.
func (sw *sweep) movedByOthers(sc *sweepCase, c *sweepConsent, t time.Time) bool {
	sc.mu.Lock()
	var last time.Time
	for _, w := range c.writes {
		last = w.At
	}
	sc.mu.Unlock()
	for _, w := range sw.caseWrites(sc) {
		if (w.Endpoint == stripepaytest.Dashboard || w.Endpoint == stripepaytest.Renewal) && w.At.After(last) && w.At.Before(t) {
			return true
		}
	}
	return false
}

// judgeNotMade: "nothing was changed" is false once any part of the
// change reached Stripe before the answer (a request still running there
// included); "not made" once Stripe made all of it before the answer, or
// at all when the answer is final (not "retry").
func (sw *sweep) judgeNotMade(sc *sweepCase, a sweepAnswer, c *sweepConsent) {
	body := string(a.body)
	final := a.status != http.StatusServiceUnavailable && a.status != http.StatusTooManyRequests &&
		!strings.Contains(strings.ToLower(body), "retry")
	sc.mu.Lock()
	made, writes := c.madeAll(), slices.Clone(c.writes)
	sc.mu.Unlock()
	if final && made {
		sc.violate(5, "the %s call was answered %d %q; Stripe made %s", a.who, a.status, body, c)
		return
	}
	nothing := strings.Contains(body, "nothing was changed")
	for _, w := range writes {
		if w.Arrived.Before(a.at) && (nothing || made && !w.At.After(a.at)) {
			sc.violate(5, "the %s call was answered %d %q; Stripe had %s (%s) under way from %s", a.who, a.status, body,
				w.Endpoint, w.Key, w.Arrived.Format("15:04:05.000"))
		}
	}
}

// judgeQuote: a quote is made from the subscription as it then was:
// Stripe's plan when it was answered (unless Stripe's dashboard or the
// renewal moved it, which billingd learns later), and never while a change
// of the subscription was running at Stripe.
func (sw *sweep) judgeQuote(sc *sweepCase, a sweepAnswer) {
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
	sc.mu.Lock()
	moved := sc.dashboard || sc.renewed
	sc.mu.Unlock()
	if !moved && p.Details.From != a.stripe.plan && p.Details.From != p.Details.To {
		sc.violate(5, "the %s call quoted a change from %s while Stripe was on %s", a.who, p.Details.From, a.stripe.plan)
	}
	if !moved && a.stripe.seats > 0 && p.Details.QuantityFrom != a.stripe.seats {
		sc.violate(5, "the %s call quoted a change from %d seats while Stripe had %d", a.who, p.Details.QuantityFrom, a.stripe.seats)
	}
	for _, w := range sw.caseWrites(sc) {
		// A write that reached Stripe before the first call was made, and
		// executed after its answer, was running all along.
		if w.Endpoint != stripepaytest.Dashboard && w.Endpoint != stripepaytest.Renewal && w.Changed() &&
			w.Arrived.Before(a.sent) && w.At.After(a.at) && planOfPrice(w.Before.PriceID) == p.Details.From {
			sc.violate(5, "the %s call quoted from %s while %s (%s) was running at Stripe", a.who, p.Details.From, w.Endpoint, w.Key)
		}
	}
	// The second witness: billingd's records of what was in flight.
	cfms := sw.confirmations(sc.org)
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

// deliver sends req to base (its path on base) and reports whether it was
// taken (2xx): a delivery that fails is delivered again later.
func deliver(base string, req *http.Request) bool {
	out, err := http.NewRequest(req.Method, base+req.URL.Path, req.Body)
	if err != nil {
		return false
	}
	out.Header = req.Header
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(out)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
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

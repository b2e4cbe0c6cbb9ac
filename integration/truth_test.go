package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The tests of "never a false word about money" (issue 19): what billingd
// records and says stays true when billingd is killed mid-call, webhooks
// come out of order, the subscription is changed in Stripe's dashboard, or
// a change is found unmade after its consent lapsed. Each failed on the
// code before the recovery point and the checks at Stripe.

// TestCrashAfterStripeSettledWithoutRetry: Stripe applies the update and
// holds its answer; billingd is SIGKILLed. With no retry and no webhook,
// another replica's settler records the change (with its receipt), and the
// owner's retry, after the token's lifetime, learns it was made (before:
// billingd showed pro for ever and the retry was told "expired, start
// again" although Stripe had charged).
func TestCrashAfterStripeSettledWithoutRetry(t *testing.T) {
	// Not parallel: kills a billingd process at a chosen moment.
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "20s"), withEnv("SETTLE_INTERVAL", "300ms"), withEnv("CONFIRM_TTL", "2s"))
	addr := freeAddr(t)
	victim := h.startServe(addr) // first: the token lives 2 s
	acct, tok, p := h.pendingUpgrade("forgot")

	h.fake.FailNext(stripepaytest.Delay(time.Minute)) // the change is made, the answer held back
	go func() { _, _ = confirmAt(t, addr, tok, p.ConfirmToken) }()
	h.eventually(10*time.Second, "the change reaching Stripe", func() bool {
		return h.fake.UpdateCount(acct.Subscription.StripeSubscriptionID) == 1
	})
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done

	// The harness's own replica (in process) is the one left running.
	h.eventually(15*time.Second, "the change recorded by a settler", func() bool { return h.subscription(tok) == "scale" })
	wantEvents(t, h.auditEvents("forgot"), "TOKEN_ISSUED", "TOKEN_VALIDATED", "OPERATION_EXECUTED")
	wantStatus(t, h.do("GET", "/api/billing/confirmations/"+p.ConfirmationID+"/receipt", tok, nil), http.StatusOK, "")

	time.Sleep(2500 * time.Millisecond) // past CONFIRM_TTL
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	var done executed
	r.decode(t, &done)
	if !done.Replayed || done.Subscription.Plan != "scale" {
		t.Fatalf("retry after the TTL: %s", r.Body)
	}
	h.wantStripeChanges(acct, 1)
}

// TestWebhooksOutOfOrder: an upgrade then a downgrade execute within a
// second; Stripe's events arrive newest first, each twice. billingd stays
// on Stripe's plan (before: it ended on scale while Stripe had pro, and
// answered the next "upgrade to scale" with noop).
func TestWebhooksOutOfOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	_, tok, up := h.pendingUpgrade("order")
	wantStatus(t, h.confirm(tok, "upgrade", "scale", up.ConfirmToken), http.StatusOK, "")
	down := h.propose(tok, "downgrade", "pro")
	wantStatus(t, h.confirm(tok, "downgrade", "pro", down.ConfirmToken), http.StatusOK, "")

	events := h.fake.Events()
	for i := len(events) - 1; i >= 0; i-- {
		for range 2 {
			wantStatus(t, h.deliver(events[i]), http.StatusOK, "")
		}
	}
	if plan := h.subscription(tok); plan != "pro" {
		t.Fatalf("billingd shows %s after the events; Stripe has pro", plan)
	}
	next := h.do("POST", "/api/billing/upgrade", tok, `{"to":"scale"}`)
	wantStatus(t, next, http.StatusAccepted, "")
}

// deliver posts a fake's event, signed, as Stripe delivers it.
func (h *harness) deliver(ev stripepaytest.Event) response {
	h.t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: ev.Payload, Secret: webhookSecret, Timestamp: time.Now()})
	req, _ := http.NewRequest("POST", h.url+"/webhooks/stripe", strings.NewReader(string(ev.Payload)))
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	return h.send(req)
}

// TestChangeAtStripeBetweenCalls: the subscription is moved to free in
// Stripe's dashboard after the first call, and no webhook says so. The
// second call finds out at Stripe: 409 consent_token_mismatch, the token
// revoked as drift, nothing sent, and billingd shows Stripe's plan (before:
// it executed pro→scale and signed a receipt saying from pro).
func TestChangeAtStripeBetweenCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("dashboard")
	h.changeInDashboard(acct.Subscription.StripeSubscriptionID, func(s *stripepaytest.Subscription) {
		s.Items[0].PriceID = "price_billingd_free"
	})
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	h.wantStripeChanges(acct, 0)
	if plan := h.subscription(tok); plan != "free" {
		t.Fatalf("billingd shows %s; Stripe has free", plan)
	}
	if names := strings.Join(eventNames(h.auditEvents("dashboard")), " "); !strings.Contains(names, "TOKEN_REVOKED:drift") {
		t.Fatalf("no drift revocation in %s", names)
	}
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	fresh := h.propose(tok, "upgrade", "scale")
	if fresh.Details.From != "free" {
		t.Fatalf("the next quote is from %s", fresh.Details.From)
	}
}

// TestReceiptStatesInvoicedAmount: Stripe invoices more than it quoted
// (tax that changed between the calls). The answer and the receipt state
// what Stripe invoiced, with the quote beside it, and say so in words
// (before: the receipt stated the quote alone).
func TestReceiptStatesInvoicedAmount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, tok, p := h.pendingUpgrade("invoiced")
	h.fake.AdjustNextInvoice(354)
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, r, http.StatusOK, "")
	var done struct {
		Charged struct {
			AmountDueNowCents       int64  `json:"amount_due_now_cents"`
			QuotedAmountDueNowCents int64  `json:"quoted_amount_due_now_cents"`
			InvoiceID               string `json:"invoice_id"`
		} `json:"charged"`
		Notice  string `json:"notice"`
		Receipt string `json:"receipt"`
	}
	r.decode(t, &done)
	quoted := p.Details.AmountDueNowCents
	invoiced, _, ok := h.fake.Invoice(done.Charged.InvoiceID)
	if !ok || invoiced != quoted+354 || done.Charged.AmountDueNowCents != invoiced || done.Charged.QuotedAmountDueNowCents != quoted {
		t.Fatalf("charged %+v; Stripe's invoice %d (found %t), quoted %d", done.Charged, invoiced, ok, quoted)
	}
	if !strings.Contains(done.Notice, formatUSD(invoiced)) || !strings.Contains(done.Notice, formatUSD(quoted)) {
		t.Fatalf("notice %q does not state both amounts", done.Notice)
	}
	claims := receiptClaimsOf(t, done.Receipt)
	if claims.AmountDueNowCents != invoiced || claims.QuotedAmountDueNowCents != quoted || claims.InvoiceID != done.Charged.InvoiceID {
		t.Fatalf("receipt claims %+v, want %d invoiced (%s), %d quoted", claims, invoiced, done.Charged.InvoiceID, quoted)
	}
}

func formatUSD(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

// receiptClaimsOf reads a receipt's claims without checking its signature
// (the evidence tests check signatures).
func receiptClaimsOf(t *testing.T, receipt string) (c struct {
	AmountDueNowCents       int64  `json:"amount_due_now_cents"`
	QuotedAmountDueNowCents int64  `json:"quoted_amount_due_now_cents"`
	InvoiceID               string `json:"invoice_id"`
}) {
	t.Helper()
	parts := strings.Split(receipt, ".")
	if len(parts) != 3 {
		t.Fatalf("receipt %q is not a compact JWS", receipt)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err == nil {
		err = json.Unmarshal(payload, &c)
	}
	if err != nil {
		t.Fatalf("receipt claims: %v", err)
	}
	return c
}

// TestResendNeedsConsentThatStillHolds: Stripe saves a 500 (nothing
// changed); the org's admin then denies scale. The change is found not
// applied and is not sent again: it is recorded as not made and the owner
// is told so (before: it was resent under a new key and executed under a
// policy that denies it).
func TestResendNeedsConsentThatStillHolds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "1h"))
	acct, tok, p := h.pendingUpgrade("consent")
	h.fake.FailNext(stripepaytest.ServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.setPolicy("consent", `{"rules":[{"name":"no scale","to_plans":["scale"],"action":"deny"}]}`)
	wantNotMade(t, h, tok, "consent", p)
	h.wantStripeChanges(acct, 0)
}

// TestResendAfterTheTokensLifetime: the same, with the policy unchanged but
// the retry coming after CONFIRM_TTL: not sent again either.
func TestResendAfterTheTokensLifetime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "1h"), withEnv("CONFIRM_TTL", "1s"))
	acct, tok, p := h.pendingUpgrade("lapsed")
	h.fake.FailNext(stripepaytest.ServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	time.Sleep(1500 * time.Millisecond) // past CONFIRM_TTL
	wantNotMade(t, h, tok, "lapsed", p)
	h.wantStripeChanges(acct, 0)
}

// wantNotMade retries p's second call until it is settled, and requires
// it settled as not made, truthfully.
func wantNotMade(t *testing.T, h *harness, tok, org string, p proposal) {
	t.Helper()
	var last response
	h.eventually(15*time.Second, "the change settled as not made", func() bool {
		last = h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
		return last.Status != http.StatusServiceUnavailable
	})
	wantStatus(t, last, http.StatusConflict, "consent_token_invalid")
	if !strings.Contains(string(last.Body), "not made") {
		t.Fatalf("the answer does not say the change was not made: %s", last.Body)
	}
	if names := strings.Join(eventNames(h.auditEvents(org)), " "); !strings.Contains(names, "OPERATION_FAILED:not_applied") {
		t.Fatalf("no OPERATION_FAILED not_applied in %s", names)
	}
}

// TestAppliedThenServerErrorThenPriceChanged: Stripe applies the update
// but saves a 500 for its key; then the price is changed in the dashboard.
// The retry recognises the change from the subscription's metadata and
// records it once (before: the read-back compared the price, saw "not
// applied" and charged again under a new key).
func TestAppliedThenServerErrorThenPriceChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct, tok, p := h.pendingUpgrade("applied500")
	h.fake.FailNext(stripepaytest.ApplyThenServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.changeInDashboard(acct.Subscription.StripeSubscriptionID, func(s *stripepaytest.Subscription) {
		s.Items[0].PriceID = "price_billingd_pro"
	})
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
	if plan := h.subscription(tok); plan != "pro" {
		t.Fatalf("billingd shows %s; Stripe has pro", plan)
	}
	executedEvents := 0
	for _, e := range h.auditEvents("applied500") {
		if e.Event == "OPERATION_EXECUTED" {
			executedEvents++
		}
	}
	if executedEvents != 1 {
		t.Fatalf("%d OPERATION_EXECUTED, want 1", executedEvents)
	}
}

// TestStepUpDoesNotHoldTheAuditChainAcrossStripe: a step-up verified
// second call waits on Stripe; meanwhile an audited request of the same
// org (an admin saving the policy) completes (before: it waited for the
// org's audit chain head until Stripe answered).
func TestStepUpDoesNotHoldTheAuditChainAcrossStripe(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "20s"))
	acct := h.createOrg("chain", "Chain", "pro")
	h.setPolicy("chain", verifyEverything)
	tok := h.user("chain", "cara")
	p := h.proposeVerify(tok, "upgrade", "scale")
	h.fake.FailNext(stripepaytest.Stall(8 * time.Second)) // Stripe holds the update
	stepUp := h.stepUpToken("chain", "cara", time.Now().Add(time.Second), "")
	var wg sync.WaitGroup
	var second response
	wg.Go(func() { second = h.confirm(stepUp, "upgrade", "scale", p.ConfirmToken) })
	h.eventually(10*time.Second, "the update held at Stripe", func() bool { return h.fake.InFlight() > 0 })

	h.setPolicy("chain", verifyEverything) // audited: POLICY_UPDATED in the org's chain
	if h.fake.InFlight() == 0 {
		t.Fatal("saving the policy waited for Stripe's answer to the second call")
	}
	wg.Wait()
	wantStatus(t, second, http.StatusOK, "")
	h.wantStripeChanges(acct, 1)
}

// TestAllowExecutionNeverAsksForAToken: under an allow policy the first
// call executes at once; when Stripe's answer is lost the caller, who never
// held a token, is not told to retry "with the same token".
func TestAllowExecutionNeverAsksForAToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "300ms"))
	h.createOrg("allow", "Allow", "pro")
	h.setPolicy("allow", `{"rules":[{"name":"downgrades","operation":"downgrade_plan","action":"allow"}]}`)
	tok := h.user("allow", "al")
	h.fake.FailNext(stripepaytest.Delay(3 * time.Second))
	r := h.do("POST", "/api/billing/downgrade", tok, `{"to":"free"}`)
	wantStatus(t, r, http.StatusServiceUnavailable, "upstream_unavailable")
	if body := string(r.Body); strings.Contains(body, "token") || !strings.Contains(body, "subscription") {
		t.Fatalf("the answer to a caller without a token: %s", body)
	}
	h.eventually(10*time.Second, "the change settled", func() bool { return h.subscription(tok) == "free" })
}

// TestLockOrderSecondCallsAgainstWebhooks: second calls race webhooks that
// revoke drifted tokens (a renewal made at Stripe) and the settler. They
// take their locks in one order, so no call is answered 503 for a
// deadlock: each second call executes, or is refused as drift because the
// renewal came first (before: a deadlock answered 503 and revoked the
// token as drift).
func TestLockOrderSecondCallsAgainstWebhooks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret), withEnv("SETTLE_INTERVAL", "100ms"))
	const orgs = 8
	var wg sync.WaitGroup
	statuses := make(chan int, orgs*2)
	for i := range orgs {
		org := fmt.Sprintf("locks%d", i)
		acct, tok, p := h.pendingUpgrade(org)
		h.changeInDashboard(acct.Subscription.StripeSubscriptionID, func(s *stripepaytest.Subscription) {
			s.CurrentPeriodStart, s.CurrentPeriodEnd = s.CurrentPeriodEnd, s.CurrentPeriodEnd.Add(30*24*time.Hour)
		})
		events := h.fake.Events()
		renewal := events[len(events)-1]
		wg.Go(func() { statuses <- h.confirm(tok, "upgrade", "scale", p.ConfirmToken).Status })
		wg.Go(func() { statuses <- h.deliver(renewal).Status })
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK && s != http.StatusConflict {
			t.Errorf("answer %d: a second call or webhook lost a lock race", s)
		}
	}
}

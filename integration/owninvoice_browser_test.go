package integration

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestReceiptViewSaysAmountInvoicedUnknown (issue 27): the receipt view
// states no amount as invoiced for a receipt whose change's own invoice
// billingd could not identify; it says the amount is unknown.
func TestReceiptViewSaysAmountInvoicedUnknown(t *testing.T) {
	h := newHarness(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(h.url + "/"))
	facts, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(receiptFacts({
		sub: "alice", client: "agent", operation: "upgrade_plan", from: "pro", to: "scale", currency: "usd",
		quoted_amount_due_now_cents: 3000, amount_invoiced_unknown: true, executed_at: "2026-11-26T20:00:00Z",
		confirmation_id: "cfm_1", iss: "https://billing.example"}))`, chromedp.EvalAsValue))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(facts, `["Amount invoiced","unknown: `) || strings.Contains(facts, "Due now") {
		t.Fatalf("receipt facts %s", facts)
	}
	b.wantNoScriptErrors()
}

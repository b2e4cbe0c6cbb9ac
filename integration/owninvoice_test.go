package integration

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestSettledAfterRenewalNeverStatesTheRenewal (issue 27): an upgrade from
// Pro to Scale is applied at Stripe and its answer lost; Stripe renews the
// subscription ($49.00 for Scale, an invoice that carries the subscription's
// metadata naming the change) before billingd settles the change. The
// answer and the signed receipt do not state the renewal's invoice as the
// upgrade's charge, nor the quote as invoiced: billingd cannot identify the
// upgrade's own invoice from the subscription, so it says the amount is
// unknown (before: $49.00, invoice of the renewal, with a notice blaming tax
// or discounts).
func TestSettledAfterRenewalNeverStatesTheRenewal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "1h"))
	_, tok, p := h.pendingUpgrade("renewed")
	h.fake.FailNext(stripepaytest.LoseResponse)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.fake.AdvanceClock(time.Until(p.Details.NextChargeAt) + time.Hour) // Stripe renews at Scale's $49.00

	var done struct {
		Charged struct {
			AmountDueNowCents     *int64 `json:"amount_due_now_cents"`
			InvoiceID             string `json:"invoice_id"`
			AmountInvoicedUnknown bool   `json:"amount_invoiced_unknown"`
		} `json:"charged"`
		Notice  string `json:"notice"`
		Receipt string `json:"receipt"`
	}
	h.eventually(15*time.Second, "the change settled", func() bool {
		r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
		if r.Status != http.StatusOK {
			return false
		}
		r.decode(t, &done)
		return true
	})
	if ch := done.Charged; !ch.AmountInvoicedUnknown || ch.AmountDueNowCents != nil || ch.InvoiceID != "" {
		t.Fatalf("charged %d (invoice %q, unknown %t): want the amount invoiced unknown", deref(ch.AmountDueNowCents),
			ch.InvoiceID, ch.AmountInvoicedUnknown)
	}
	if strings.Contains(done.Notice, "$49.00") || strings.Contains(done.Notice, "tax") || !strings.Contains(done.Notice, "unknown") {
		t.Fatalf("notice %q", done.Notice)
	}
	var claims struct {
		AmountDueNowCents     *int64 `json:"amount_due_now_cents"`
		InvoiceID             string `json:"invoice_id"`
		AmountInvoicedUnknown bool   `json:"amount_invoiced_unknown"`
	}
	parts := strings.Split(done.Receipt, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[min(1, len(parts)-1)])
	if err != nil || json.Unmarshal(payload, &claims) != nil {
		t.Fatalf("receipt %q", done.Receipt)
	}
	if !claims.AmountInvoicedUnknown || claims.AmountDueNowCents != nil || claims.InvoiceID != "" {
		t.Fatalf("receipt states %d invoiced (invoice %q, unknown %t): want it unknown", deref(claims.AmountDueNowCents),
			claims.InvoiceID, claims.AmountInvoicedUnknown)
	}

	// billingd audit verify says so of the receipt, in words.
	dir := t.TempDir()
	jwks, _ := json.Marshal(h.receiptKeys())
	jwksFile, exportFile := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "export.jsonl")
	if os.WriteFile(jwksFile, jwks, 0o600) != nil || os.WriteFile(exportFile, h.exportAudit("renewed"), 0o600) != nil {
		t.Fatal("write the export")
	}
	c := cli{t: t, bin: billingdBinary(t), env: []string{"PATH=" + os.Getenv("PATH")}}
	stdout, stderr, code := c.run("audit", "verify", "--jwks", jwksFile, exportFile)
	if code != 0 || !strings.Contains(stdout, p.ConfirmationID+" upgrade_plan, amount invoiced: unknown: consent ") {
		t.Fatalf("audit verify: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func deref(n *int64) int64 {
	if n == nil {
		return -1
	}
	return *n
}

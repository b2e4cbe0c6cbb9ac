package evidence

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// TestVerifySaysAmountInvoicedUnknown (issue 27): a receipt whose change's
// own invoice billingd could not identify is reported as such, never as an
// amount; one with its invoice says nothing of it.
func TestVerifySaysAmountInvoicedUnknown(t *testing.T) {
	keys := testKeys(t)
	for _, tt := range []struct {
		claims billing.ReceiptClaims
		want   string
	}{
		{billing.ReceiptClaims{AmountInvoicedUnknown: true, QuotedAmountDueNowCents: 3000}, "amount invoiced: unknown"},
		{billing.ReceiptClaims{AmountDueNowCents: new(int64(3000)), InvoiceID: "in_7"}, ""},
	} {
		c := tt.claims
		c.Org, c.Subject, c.ConfirmationID, c.Operation = "acme", "alice", "cfm_1", billing.OpUpgrade
		jws, err := keys.SignReceipt(c)
		if err != nil {
			t.Fatal(err)
		}
		e := billing.ChainedEvent{AuditEvent: billing.AuditEvent{ID: 1, At: time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC),
			Event: billing.EventOperationExecuted, Org: "acme", Principal: "alice", Operation: "upgrade_plan",
			ConfirmationID: "cfm_1", Outcome: "ok"}, Seq: 1, PrevHash: GenesisHash}
		e.Receipt = jws
		e.Hash = Hash(e)
		line, _ := json.Marshal(e)
		rep, err := Verify(strings.NewReader(string(line)+"\n"), keys.JWKS(), Options{AllowUnsigned: true})
		if err != nil || len(rep.Executed) != 1 {
			t.Fatalf("Verify = %+v, %v", rep, err)
		}
		if got := InvoicedText(rep.Executed[0]); got != tt.want {
			t.Errorf("InvoicedText = %q, want %q", got, tt.want)
		}
	}
}

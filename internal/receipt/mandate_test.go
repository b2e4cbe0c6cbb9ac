package receipt

import (
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// TestSignMandate: a signed mandate verifies with the same published keys
// as receipts and states every bound; it is never taken for a receipt or
// a checkpoint, nor they for it (its own typ).
func TestSignMandate(t *testing.T) {
	k := keysFrom(t, newKey(t))
	want := billing.MandateClaims{Issuer: "https://billing.example", Subject: "alice", MandateID: "mdt_1", Org: "acme",
		Client: "agent", Operations: []billing.Operation{billing.OpUpgrade}, ToPlans: []string{"scale"},
		MaxAmountDueCents: 4000, BudgetCents: 10000, MaxChanges: 2, ExpiresAt: time.Unix(1800000000, 0).UTC(), Currency: "usd"}
	token, err := k.SignMandate(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyMandate(token, k.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	if got.MandateID != want.MandateID || got.BudgetCents != want.BudgetCents || got.MaxChanges != want.MaxChanges ||
		!got.ExpiresAt.Equal(want.ExpiresAt) || got.Subject != "alice" {
		t.Fatalf("claims %+v", got)
	}
	if _, err := Verify(token, k.JWKS()); err == nil {
		t.Fatal("a mandate verified as a receipt")
	}
	receipt, err := k.SignReceipt(claims())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyMandate(receipt, k.JWKS()); err == nil {
		t.Fatal("a receipt verified as a mandate")
	}
	if _, err := VerifyMandate(token, keysFrom(t, newKey(t)).JWKS()); err == nil {
		t.Fatal("a mandate verified with another key")
	}
}

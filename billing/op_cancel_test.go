package billing

import (
	"strings"
	"testing"
	"time"
)

// TestCancelWords: a cancellation says when access ends, what is credited
// (never refunded) and whether it can be undone; its danger says so too.
func TestCancelWords(t *testing.T) {
	pro := testPlan(t, "pro")
	dec27 := time.Date(2026, 12, 27, 0, 0, 0, 0, time.UTC)
	base := Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Currency: "usd", NextChargeAt: dec27,
		Livemode: true, Quantity: 2}
	later, now := base, base
	later.Cancellation = CancelAtPeriodEnd
	now.Cancellation, now.CreditCents = CancelNow, 2533
	for _, c := range []struct {
		t      Terms
		want   string
		danger Danger
	}{
		{later, "Cancel Acme's Pro subscription, 2 seats at the end of the current period: it stays active until Dec 27, 2026, " +
			"then ends instead of renewing. Nothing is charged or refunded; it can be resumed until then.", DangerReversible},
		{now, "Cancel Acme's Pro subscription, 2 seats now: access ends immediately, instead of on Dec 27, 2026, and this cannot be " +
			"undone. The unused time, about $25.33 as of now, is credited to the account's balance for future invoices; no money is " +
			"paid back.", DangerIrreversible},
	} {
		if got := summarize("Acme", cancelSubscription, pro, pro, c.t, ""); got != c.want {
			t.Errorf("summary\n  %q\nwant\n  %q", got, c.want)
		}
		if got := c.t.danger(); got != c.danger {
			t.Errorf("%s: danger %s, want %s", c.t.Cancellation, got, c.danger)
		}
		if c.t.chargesNow() || keepsPlan(c.t) {
			t.Errorf("%s: charges now or keeps the plan", c.t.Cancellation)
		}
	}
	if strings.Contains(strings.ToLower(summarize("Acme", cancelSubscription, pro, pro, now, "")), "refund") {
		t.Error("cancelling now speaks of a refund")
	}
	// "at" is never a default for cancelling.
	for _, req := range []ChangeRequest{{Operation: OpCancel}, {Operation: OpCancel, At: "later"}} {
		if err := validateRequest(req); ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("%+v: %v", req, err)
		}
	}
}

// TestNothingRecursWhenCancelled: while the subscription is cancelled at
// the period's end, a change's summary promises no recurring charge.
func TestNothingRecursWhenCancelled(t *testing.T) {
	pro, scale := testPlan(t, "pro"), testPlan(t, "scale")
	dec27 := time.Date(2026, 12, 27, 0, 0, 0, 0, time.UTC)
	seatsUp := Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Currency: "usd", NextChargeAt: dec27,
		Livemode: true, Quantity: 2, ToQuantity: 5, AmountDueCents: 100, SubtotalCents: 100, FromCancelAtPeriodEnd: true}
	upgrade := Terms{FromPlan: "pro", ToPlan: "scale", FromAmountCents: 1900, ToAmountCents: 4900, Currency: "usd", NextChargeAt: dec27,
		Livemode: true, AmountDueCents: 100, SubtotalCents: 100, FromCancelAtPeriodEnd: true}
	for _, got := range []string{summarize("Acme", changeSeats, pro, pro, seatsUp, ""), summarize("Acme", upgradePlan, pro, scale, upgrade, "")} {
		if !strings.HasSuffix(got, "nothing recurs: the subscription still ends on Dec 27, 2026, as cancelled.") ||
			strings.Contains(got, "first full") || strings.Contains(got, "recurs from") {
			t.Errorf("summary %q", got)
		}
	}
}

// TestCancelFeedbackShown: what a cancellation sends to Stripe in the
// customer's name is in the summary they agree to, whole.
func TestCancelFeedbackShown(t *testing.T) {
	pro := testPlan(t, "pro")
	c := Terms{FromPlan: "pro", ToPlan: "pro", Currency: "usd", Livemode: true, Cancellation: CancelAtPeriodEnd,
		CancelReason: "too_expensive", CancelComment: strings.Repeat("ok ", 40) + "end"}
	got := summarize("Acme", cancelSubscription, pro, pro, c, "")
	if !strings.HasSuffix(got, `Sent to Stripe with it: reason too expensive, comment "`+c.CancelComment+`".`) {
		t.Errorf("summary %q", got)
	}
}

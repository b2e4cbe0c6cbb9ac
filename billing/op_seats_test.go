package billing

import (
	"strings"
	"testing"
	"time"
)

// TestSeatsWords: a change of seats says what is added or removed, from
// and to how many, the price of each, what moves now and what recurs from
// when; a credit is a credit, never a refund.
func TestSeatsWords(t *testing.T) {
	pro := testPlan(t, "pro")
	dec27 := time.Date(2026, 12, 27, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		t    Terms
		want string
	}{
		{"more", Terms{Quantity: 2, ToQuantity: 5, AmountDueCents: 4123, SubtotalCents: 4123},
			"Add 3 seats to Acme's Pro plan: from 2 seats to 5 seats at $19/mo per seat. Pro-rated to today: $41.23 due now; " +
				"then $95/mo for 5 seats recurs from Dec 27, 2026."},
		{"one more", Terms{Quantity: 1, ToQuantity: 2, AmountDueCents: 900, SubtotalCents: 900},
			"Add 1 seat to Acme's Pro plan: from 1 seat to 2 seats at $19/mo per seat. Pro-rated to today: $9.00 due now; " +
				"then $38/mo for 2 seats recurs from Dec 27, 2026."},
		{"fewer", Terms{Quantity: 5, ToQuantity: 2, CreditCents: 2700},
			"Remove 3 seats from Acme's Pro plan: from 5 seats to 2 seats at $19/mo per seat. Nothing is charged now; " +
				"a pro-rated credit of $27.00 goes to the next invoice; then $38/mo for 2 seats recurs from Dec 27, 2026."},
		{"fewer at period end", Terms{Quantity: 5, ToQuantity: 2, AtPeriodEnd: true, AtRenewal: &Amounts{AmountDueCents: 3800, SubtotalCents: 3800}},
			"Remove 3 seats from Acme's Pro plan: from 5 seats to 2 seats at $19/mo per seat, at the end of the current period. " +
				"Nothing changes or is charged now; on Dec 27, 2026 the subscription becomes 2 seats and $38.00 will be charged then."},
	} {
		c.t.FromPlan, c.t.ToPlan, c.t.FromAmountCents, c.t.ToAmountCents = "pro", "pro", pro.AmountCents, pro.AmountCents
		c.t.Currency, c.t.NextChargeAt, c.t.Livemode = "usd", dec27, true
		got := summarize("Acme", changeSeats, pro, pro, c.t, "")
		if got != c.want {
			t.Errorf("%s:\n  %q\nwant\n  %q", c.name, got, c.want)
		}
		if strings.Contains(strings.ToLower(got), "refund") {
			t.Errorf("%s: a credit called a refund: %q", c.name, got)
		}
	}
}

// TestChargesNow: what is invoiced at once follows from the terms alone:
// made now, and what recurs goes up (a dearer plan, more seats).
func TestChargesNow(t *testing.T) {
	keep := &ScheduledChange{ToPlan: "free"}
	for _, c := range []struct {
		name string
		t    Terms
		want bool
	}{
		{"upgrade", Terms{FromPlan: "pro", ToPlan: "scale", FromAmountCents: 1900, ToAmountCents: 4900}, true},
		{"upgrade from free", Terms{FromPlan: "free", ToPlan: "pro", ToAmountCents: 1900}, true},
		{"downgrade", Terms{FromPlan: "scale", ToPlan: "pro", FromAmountCents: 4900, ToAmountCents: 1900}, false},
		{"upgrade of 5 seats", Terms{FromPlan: "pro", ToPlan: "scale", FromAmountCents: 1900, ToAmountCents: 4900, Quantity: 5}, true},
		{"more seats", Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Quantity: 2, ToQuantity: 3}, true},
		{"fewer seats", Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Quantity: 3, ToQuantity: 2}, false},
		{"fewer seats at period end", Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Quantity: 3,
			ToQuantity: 2, AtPeriodEnd: true}, false},
		{"keep", Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Cancels: keep}, false},
		{"more seats over a schedule", Terms{FromPlan: "pro", ToPlan: "pro", FromAmountCents: 1900, ToAmountCents: 1900, Quantity: 2,
			ToQuantity: 3, Cancels: keep}, true},
	} {
		if got := c.t.chargesNow(); got != c.want {
			t.Errorf("%s: chargesNow %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSeatsRequests: what change_seats takes, and what a second call
// must repeat.
func TestSeatsRequests(t *testing.T) {
	for _, c := range []struct {
		req ChangeRequest
		ok  bool
	}{
		{ChangeRequest{Operation: OpSeats, Quantity: 3}, true},
		{ChangeRequest{Operation: OpSeats, Quantity: 3, At: AtPeriodEnd}, true},
		{ChangeRequest{Operation: OpSeats, Quantity: MaxSeats}, true},
		{ChangeRequest{Operation: OpSeats}, false},
		{ChangeRequest{Operation: OpSeats, Quantity: MaxSeats + 1}, false},
		{ChangeRequest{Operation: OpSeats, Quantity: 3, To: "pro"}, false},
		{ChangeRequest{Operation: OpUpgrade, To: "pro", Quantity: 3}, false},
	} {
		if err := validateRequest(c.req); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.req, err, c.ok)
		}
	}
	c := Confirmation{Operation: OpSeats, Terms: Terms{FromPlan: "pro", ToPlan: "pro", Quantity: 2, ToQuantity: 5}}
	if !sameRequest(c, ChangeRequest{Operation: OpSeats, Quantity: 5}) || sameRequest(c, ChangeRequest{Operation: OpSeats, Quantity: 4}) ||
		sameRequest(c, ChangeRequest{Operation: OpUpgrade, To: "pro"}) || sameRequest(c, ChangeRequest{Operation: OpSeats, Quantity: 5, To: "pro"}) {
		t.Error("a second call of change_seats must name the first call's seats and nothing else")
	}
	if got := requestOf(c); got.Operation != OpSeats || got.Quantity != 5 || got.To != "" {
		t.Errorf("requestOf: %+v", got)
	}
}

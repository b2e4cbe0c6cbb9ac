package billing

import "fmt"

// OpSeats changes the number of seats on the current plan (contract §15):
// more seats are invoiced at once, prorated, like an upgrade (a declined
// card: nothing changed); fewer are credited on the next invoice, or made
// at the end of the period by a subscription schedule ("at":
// "period_end").
const OpSeats Operation = "change_seats"

// MaxSeats is the most seats a request may ask for.
const MaxSeats = 10000

var changeSeats = &operation{
	name: OpSeats,
	offered: Offered{
		Path: "seats", Title: "Change the number of seats",
		About: "Change how many seats the subscription has, on its current plan. More seats are charged now, prorated; " +
			"fewer seats are credited on the next invoice, or with at: period_end made at the end of the billing period " +
			"with nothing charged or credited now.",
		Args: []string{"quantity", "at"}, Required: []string{"quantity"},
	},
	check: func(req ChangeRequest) error {
		switch {
		case req.To != "":
			return Errorf(CodeInvalidRequest, `"to" is a plan change's: change_seats keeps the plan`)
		case req.Reason != "" || req.Comment != "":
			return Errorf(CodeInvalidRequest, `"reason" and "comment" are cancel_subscription's`)
		case req.Quantity < 1 || req.Quantity > MaxSeats:
			return Errorf(CodeInvalidRequest, `"quantity" must be a whole number of seats from 1 to %d`, MaxSeats)
		}
		return nil
	},
	target: func(c Catalog, sub Subscription, req ChangeRequest) (wanted, error) {
		plan, ok := c.Plan(sub.Plan)
		if !ok {
			return wanted{}, Errorf(CodeInvalidPlanChange, "the subscription is on a plan outside the catalog: change its plan first")
		}
		if req.atPeriodEnd() && req.Quantity > seats(sub.Quantity) {
			return wanted{}, Errorf(CodeInvalidRequest,
				`more seats are charged now: "at": "period_end" applies to fewer seats only`)
		}
		return wanted{to: plan, seats: req.Quantity}, nil
	},
	fields: func(_ string, n int64) (string, int64) { return "", n },
	words:  seatsWords,
}

// seatsWords is the summary of a change of seats: from how many to how
// many, the price of each, what moves now and what recurs from when.
func seatsWords(orgName string, plan, _ Plan, t Terms) string {
	from, to := t.seatsFrom(), t.seatsTo()
	verb, prep := "Add", "to"
	if to < from {
		verb, prep = "Remove", "from"
	}
	n := max(from, to) - min(from, to)
	head := fmt.Sprintf("%s %s %s %s's %s plan: from %s to %s at %s per seat",
		verb, seatCount(n), prep, orgName, plan.Name, seatCount(from), seatCount(to), formatPrice(plan))
	date := day(t.NextChargeAt)
	recurs := fmt.Sprintf("%s for %s recurs from %s.", formatRecurring(plan, to), seatCount(to), date)
	if t.FromCancelAtPeriodEnd {
		recurs = endsAsCancelled(t)
	}
	switch {
	case t.AtPeriodEnd:
		return fmt.Sprintf("%s, at the end of the current period. Nothing changes or is charged now; on %s the subscription "+
			"becomes %s and %s.", head, date, seatCount(to), amountPhrase(*t.AtRenewal, t.Currency, "will be charged then"))
	case t.chargesNow():
		return fmt.Sprintf("%s. Pro-rated to today: %s; then %s", head, dueNowPhrase(t), recurs)
	case t.CreditCents > 0:
		return fmt.Sprintf("%s. Nothing is charged now; a pro-rated credit of %s goes to the next invoice; then %s",
			head, formatMoney(t.CreditCents, t.Currency), recurs)
	default:
		return fmt.Sprintf("%s. Nothing is charged now; then %s", head, recurs)
	}
}

// seatCount is "1 seat", "5 seats".
func seatCount(n int64) string {
	if n == 1 {
		return "1 seat"
	}
	return fmt.Sprintf("%d seats", n)
}

// formatRecurring is what n seats of plan cost each period: "$95/mo".
func formatRecurring(plan Plan, n int64) string {
	plan.AmountCents *= n
	return formatPrice(plan)
}

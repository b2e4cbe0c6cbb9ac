package billing

import "fmt"

// What the two plan operations (op_upgrade.go, op_downgrade.go) share: the
// request names a plan of the catalog, on one side of the current one, and
// the change keeps the seats.

// planMove is an operation that moves the subscription to another plan:
// verb begins its summary ("Upgrade"); direction is where the plan must
// lie from the current one in the catalog (+1 above, -1 below, or the same
// plan, which keeps it), wrongWay the answer to one on the other side;
// schedulable: it may wait for the end of the period ("at": "period_end").
func planMove(name Operation, verb string, direction int, wrongWay string, schedulable bool, offered Offered) *operation {
	return &operation{
		name:    name,
		offered: offered,
		check: func(req ChangeRequest) error {
			switch {
			case !planIDPattern.MatchString(req.To):
				return Errorf(CodeInvalidRequest, `"to" must be a plan id`)
			case req.Quantity != 0:
				return Errorf(CodeInvalidRequest, `"quantity" is change_seats's: a plan change keeps the seats`)
			case req.Reason != "" || req.Comment != "":
				return Errorf(CodeInvalidRequest, `"reason" and "comment" are cancel_subscription's`)
			case req.At == AtPeriodEnd && !schedulable:
				return Errorf(CodeInvalidRequest, `"at": "period_end" applies to downgrades and fewer seats only`)
			}
			return nil
		},
		target: func(c Catalog, sub Subscription, req ChangeRequest) (wanted, error) {
			to, ok := c.Plan(req.To)
			if !ok {
				return wanted{}, Errorf(CodeUnknownPlan, "no such plan")
			}
			if way := c.rank(to.ID) - c.rank(sub.Plan); way*direction < 0 {
				return wanted{}, Errorf(CodeInvalidPlanChange, "%s", wrongWay)
			}
			return wanted{to: to, seats: seats(sub.Quantity)}, nil
		},
		fields: func(to string, _ int64) (string, int64) { return to, 0 },
		words:  func(orgName string, from, to Plan, t Terms) string { return planWords(verb, orgName, from, to, t) },
	}
}

// endsAsCancelled says that nothing recurs: the subscription is cancelled
// at the end of the period (a change made meanwhile does not resume it).
func endsAsCancelled(t Terms) string {
	return fmt.Sprintf("nothing recurs: the subscription still ends on %s, as cancelled.", day(t.NextChargeAt))
}

// planWords is the summary of a plan change.
func planWords(verb, orgName string, from, to Plan, t Terms) string {
	each := perSeat(t)
	head := fmt.Sprintf("%s %s from %s (%s%s) to %s (%s%s)%s",
		verb, orgName, from.Name, formatPrice(from), each, to.Name, formatPrice(to), each, seatsPhrase(t))
	date := day(t.NextChargeAt)
	next := fmt.Sprintf("first full %s charge on %s.", to.Name, date)
	switch {
	case t.FromCancelAtPeriodEnd:
		next = endsAsCancelled(t)
	case to.AmountCents == 0:
		next = fmt.Sprintf("no charges from %s.", date)
	}
	switch {
	case t.AtPeriodEnd:
		then := fmt.Sprintf("on %s the plan becomes %s and %s.", date, to.Name,
			amountPhrase(*t.AtRenewal, t.Currency, "will be charged then"))
		if to.AmountCents == 0 {
			then = fmt.Sprintf("on %s the plan becomes %s, with no charges from then.", date, to.Name)
		}
		return fmt.Sprintf("%s at the end of the current period. Nothing changes or is charged now; %s", head, then)
	case t.chargesNow():
		return fmt.Sprintf("%s. Pro-rated to today: %s; %s", head, dueNowPhrase(t), next)
	case t.CreditCents > 0:
		return fmt.Sprintf("%s. Nothing is charged now; a pro-rated credit of %s goes to the next invoice; %s",
			head, formatMoney(t.CreditCents, t.Currency), next)
	default:
		return fmt.Sprintf("%s. Nothing is charged now; %s", head, next)
	}
}

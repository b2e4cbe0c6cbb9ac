package billing

import "fmt"

// OpResume undoes a pending cancellation at the end of the period: the
// subscription renews again. Nothing is charged now; a scheduled change
// the cancellation replaced does not come back.
const OpResume Operation = "resume_subscription"

var resumeSubscription = &operation{
	name: OpResume,
	offered: Offered{
		Path: "resume", Title: "Resume the subscription",
		About: "Undo a cancellation at the end of the billing period: the subscription renews instead of ending. Nothing is charged now.",
	},
	check: func(req ChangeRequest) error {
		if req.To != "" || req.Quantity != 0 || req.At != "" || req.Reason != "" || req.Comment != "" {
			return Errorf(CodeInvalidRequest, "resume_subscription takes no arguments but the token")
		}
		return nil
	},
	target: func(c Catalog, sub Subscription, _ ChangeRequest) (wanted, error) {
		plan, _ := c.Plan(sub.Plan) // Service.target checked it
		return wanted{to: plan, seats: seats(sub.Quantity), cancellation: Resume}, nil
	},
	fields: func(string, int64) (string, int64) { return "", 0 },
	words: func(orgName string, plan, _ Plan, t Terms) string {
		return fmt.Sprintf("Resume %s's %s subscription%s: instead of ending on %s, it renews then at %s%s. Nothing is charged now.",
			orgName, plan.Name, seatsPhrase(t), day(t.NextChargeAt), formatRecurring(plan, t.seatsFrom()), perSeatNote(t))
	},
}

// perSeatNote says how a recurring amount of several seats is made.
func perSeatNote(t Terms) string {
	if n := t.seatsFrom(); n > 1 {
		return fmt.Sprintf(" (%d seats)", n)
	}
	return ""
}

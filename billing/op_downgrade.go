package billing

// OpDowngrade changes to a cheaper plan: now, with the unused time credited
// to the next invoice, or at the end of the period by a subscription
// schedule (schedule.go).
const OpDowngrade Operation = "downgrade_plan"

var downgradePlan = planMove(OpDowngrade, "Downgrade", -1,
	"that plan is more expensive than the current one: use upgrade", true, Offered{
		Path: "downgrade", Title: "Downgrade the subscription plan",
		About: "Move the organisation to a cheaper plan; the unused part of the period is credited on the next invoice. " +
			"With at: period_end the plan changes at the end of the billing period instead, with nothing charged or credited now; " +
			"while such a change is scheduled, calling with to = the current plan proposes keeping it (cancelling the scheduled change).",
		Args: []string{"to", "at"}, Required: []string{"to"},
	})

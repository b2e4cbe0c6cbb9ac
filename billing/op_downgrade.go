package billing

// OpDowngrade changes to a cheaper plan: now, with the unused time credited
// to the next invoice, or at the end of the period by a subscription
// schedule (schedule.go).
const OpDowngrade Operation = "downgrade_plan"

var downgradePlan = planMove(OpDowngrade, "Downgrade", -1,
	"that plan is more expensive than the current one: use upgrade", true)

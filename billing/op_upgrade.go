package billing

// OpUpgrade changes to a more expensive plan now: the prorated difference
// is invoiced at once, and a declined card means nothing changed.
const OpUpgrade Operation = "upgrade_plan"

var upgradePlan = planMove(OpUpgrade, "Upgrade", +1,
	"that plan is cheaper than the current one: use downgrade", false, Offered{
		Path: "upgrade", Title: "Upgrade the subscription plan",
		About: "Move the organisation to a more expensive plan; the second call charges the prorated difference now.",
		Args:  []string{"to"}, Required: []string{"to"},
	})

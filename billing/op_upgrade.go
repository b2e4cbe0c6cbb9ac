package billing

// OpUpgrade changes to a more expensive plan now: the prorated difference
// is invoiced at once, and a declined card means nothing changed.
const OpUpgrade Operation = "upgrade_plan"

var upgradePlan = planMove(OpUpgrade, "Upgrade", +1,
	"that plan is cheaper than the current one: use downgrade", false)

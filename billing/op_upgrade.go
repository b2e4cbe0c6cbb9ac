package billing

// OpUpgrade changes to a more expensive plan now: the prorated difference
// is invoiced at once, and a declined card means nothing changed.
const OpUpgrade Operation = "upgrade_plan"

var upgradePlan = &operation{
	name:       OpUpgrade,
	verb:       "Upgrade",
	direction:  +1,
	wrongWay:   "that plan is cheaper than the current one: use downgrade",
	chargesNow: true,
}

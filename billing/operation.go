package billing

import (
	"fmt"
	"strings"
)

// Operations as data. Every change the handshake gates is one operation
// value in a file of its own (op_upgrade.go, op_downgrade.go), listed once
// in operations below. The handshake's machinery (propose, consume, the
// recovery point, send, record, settle, replay) asks the value what differs
// and names no operation: adding one is its file, its tests and a line here.

// operations are the gated operations, in the order clients list them.
var operations = []*operation{upgradePlan, downgradePlan}

// operationsByName finds them by name.
var operationsByName = byName(operations)

// operation is what one kind of change is to the handshake.
type operation struct {
	name Operation
	// verb begins its summary ("Upgrade", "Downgrade").
	verb string
	// direction is where the plan it changes to must lie from the current
	// one in the catalog: +1 above, -1 below (or the same plan, which keeps
	// it); wrongWay is the answer to a plan on the other side.
	direction int
	wrongWay  string
	// schedulable: it may wait for the end of the period ("at":
	// "period_end").
	schedulable bool
	// chargesNow: made now, the provider invoices it at once, and a
	// declined payment means nothing was changed.
	chargesNow bool
}

// Danger says what kind of change a confirmation is (contract §15), for
// the person reading the summary and for a policy rule to match.
type Danger string

// The kinds of change, the mildest first.
const (
	// DangerReversible: nothing moves now and it can be undone (a change
	// at the period's end, keeping the plan).
	DangerReversible Danger = "reversible"
	// DangerCharges: money moves now, a charge or a credit.
	DangerCharges Danger = "charges"
	// DangerIrreversible: it ends something now that cannot be undone.
	DangerIrreversible Danger = "irreversible"
)

// dangers are the kinds of change, for checking a policy's rules.
var dangers = []Danger{DangerReversible, DangerCharges, DangerIrreversible}

// danger is the kind of change the terms t of o are.
func (o *operation) danger(t Terms) Danger {
	if t.AtPeriodEnd || keepsPlan(t) {
		return DangerReversible
	}
	return DangerCharges
}

// chargesNowFor reports whether the change t of o is invoiced at once: o
// charges and t is made now, not one that only keeps the plan.
func (o *operation) chargesNowFor(t Terms) bool {
	return o.chargesNow && !keepsPlan(t) && !t.AtPeriodEnd
}

// operationOf is the operation named op; ok is false for a name that is
// none.
func operationOf(op Operation) (o *operation, ok bool) {
	o, ok = operationsByName[op]
	return o, ok
}

// mustOperation is the operation of a stored confirmation, whose name was
// checked when it was issued (and the database's CHECK on the column holds
// only names of operations).
func mustOperation(op Operation) *operation {
	o, ok := operationsByName[op]
	if !ok {
		panic(fmt.Sprintf("billing: confirmation of unknown operation %q", op))
	}
	return o
}

// Operations lists the names of the gated operations.
func Operations() []Operation {
	names := make([]Operation, len(operations))
	for i, o := range operations {
		names[i] = o.name
	}
	return names
}

// operationList names every operation, for an error message:
// "upgrade_plan or downgrade_plan".
func operationList() string {
	var names []string
	for _, op := range Operations() {
		names = append(names, string(op))
	}
	return strings.Join(names, " or ")
}

func byName(ops []*operation) map[Operation]*operation {
	m := make(map[Operation]*operation, len(ops))
	for _, o := range ops {
		m[o.name] = o
	}
	return m
}

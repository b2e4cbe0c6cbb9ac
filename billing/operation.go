package billing

import (
	"strings"
)

// Operations as data. Every change the handshake gates is one operation
// value in a file of its own (op_upgrade.go, op_downgrade.go,
// op_seats.go), listed once in operations below. The value says what a
// request asks for and how the change is written for a person; the
// handshake's machinery (propose, consume, the recovery point, send,
// record, settle, replay) works on the terms it yields and names no
// operation: adding one is its file, its tests and a line here.

// operations are the gated operations, in the order clients list them.
var operations = []*operation{upgradePlan, downgradePlan, changeSeats, cancelSubscription, resumeSubscription}

// operationsByName finds them by name.
var operationsByName = byName(operations)

// operation is what one kind of change is to the handshake.
type operation struct {
	name Operation
	// offered is how the transports offer it.
	offered Offered
	// check checks the request's own fields before anything is read.
	check func(req ChangeRequest) error
	// target is what the request asks the subscription sub to become. It
	// refuses a request the operation does not make (a cheaper plan for an
	// upgrade).
	target func(c Catalog, sub Subscription, req ChangeRequest) (wanted, error)
	// fields are the request's own fields that ask for the plan to with n
	// seats after the change: a second call must name what its first call
	// did (asksFor), and a transport redeeming a proposal for its caller
	// names it so (ChangeResult.SecondCall).
	fields func(to string, n int64) (reqTo string, reqQuantity int64)
	// words is the summary of a change (not a keep) for a person.
	words func(orgName string, from, to Plan, t Terms) string
}

// wanted is what a request asks the subscription to become: its plan and
// seats after the change, and what the change does to its end.
type wanted struct {
	to           Plan
	seats        int64
	cancellation Cancellation
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

// danger is the kind of change the terms t are.
func (t Terms) danger() Danger {
	switch {
	case t.Cancellation == CancelNow:
		return DangerIrreversible
	case t.AtPeriodEnd || keepsPlan(t) || t.Cancellation != "":
		return DangerReversible
	}
	return DangerCharges
}

// chargesNow reports whether the change t is invoiced at once: made now,
// and what recurs goes up (a dearer plan, more seats). The provider then
// charges the prorated difference at once, and a declined payment means
// nothing was changed; a change that lowers it is credited on the next
// invoice.
func (t Terms) chargesNow() bool {
	return !keepsPlan(t) && !t.AtPeriodEnd && t.Cancellation == "" &&
		t.ToAmountCents*t.seatsTo() > t.FromAmountCents*t.seatsFrom()
}

// seatsFrom and seatsTo are the seats before and after the change.
func (t Terms) seatsFrom() int64 { return seats(t.Quantity) }
func (t Terms) seatsTo() int64 {
	if t.ToQuantity > 0 {
		return t.ToQuantity
	}
	return t.seatsFrom()
}

// operationOf is the operation named op; ok is false for a name that is
// none.
func operationOf(op Operation) (o *operation, ok bool) {
	o, ok = operationsByName[op]
	return o, ok
}

// Offered is how the transports offer a gated operation: REST's POST
// /api/billing/<Path>, and the MCP tool named after it with Title and
// About (what it does; the tool adds the handshake's rules). Args are the
// request fields it takes besides confirm_token, of which Required are
// required.
type Offered struct {
	Name           Operation
	Path           string
	Title, About   string
	Args, Required []string
}

// Offers lists the gated operations as the transports offer them, in the
// order clients list them.
func Offers() []Offered {
	out := make([]Offered, len(operations))
	for i, o := range operations {
		out[i] = o.offered
		out[i].Name = o.name
	}
	return out
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
// "upgrade_plan, downgrade_plan or change_seats".
func operationList() string {
	var names []string
	for _, op := range Operations() {
		names = append(names, string(op))
	}
	last := len(names) - 1
	if last < 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

func byName(ops []*operation) map[Operation]*operation {
	m := make(map[Operation]*operation, len(ops))
	for _, o := range ops {
		m[o.name] = o
	}
	return m
}

package stripepaytest

import (
	"fmt"
	"time"
)

// previewInvoice is the invoice Stripe would show for making changes to sub
// at the time at. Callers hold s.mu.
//
// Per changed item (its price, its quantity or both), with old and new the
// item's amount (unit amount × quantity) before and after the change, remaining = current_period_end − at
// and length = current_period_end − current_period_start (30 days), in
// seconds:
//
//	net    = round((new − old) × remaining / length)
//	credit = −round(old × remaining / length)    "Unused time on …"
//	charge = net − credit                        "Remaining time on …"
//
// rounding half away from zero. Stripe rounds the credit and the charge
// separately, so its lines can differ from these by a cent; deriving the
// charge from net instead makes the lines add up to net exactly, whichever
// way the invoice splits it. Example: Pro 1900 → Scale 4900 with 15 of 30
// days left: net 1500, credit −950, charge 2450.
//
//   - always_invoice previews the invoice created and charged at once: one
//     proration line of net per changed item; amount_due = max(0, Σ net).
//   - create_prorations previews the next regular invoice: the credit and
//     charge lines (proration: true) plus one line per item for the next
//     period at the new price; amount_due = max(0, next period + Σ net).
//   - none previews the next regular invoice, the renewal, as Stripe's
//     upcoming invoice: nothing prorated, one line per item for the next
//     period (current_period_end + 30 days) at the new price; the
//     invoice's period_start and period_end are the current period
//     (Stripe's "look back one period"). That is what a change scheduled
//     for the period's end (a subscription schedule's next phase) will
//     charge, as far as it is known today.
//
// A negative total is not due (Stripe would credit the customer's balance),
// hence the max(0, …). Discounts, tax and the customer balance then apply
// as invoice.go describes.
func (s *Server) previewInvoice(sub *Subscription, changes []itemChange, behavior string, at time.Time) invoiceJSON {
	remaining := int64(sub.CurrentPeriodEnd.Sub(at) / time.Second)
	length := int64(sub.CurrentPeriodEnd.Sub(sub.CurrentPeriodStart) / time.Second)
	plans := s.itemPlans(sub, changes)

	var lines []lineJSON
	if behavior != "none" {
		for _, p := range plans {
			if !p.changed() {
				continue
			}
			l, _ := s.prorationLines(sub, p, behavior == "always_invoice", remaining, length, at)
			lines = append(lines, l...)
		}
	}
	periodStart, periodEnd := at, at
	if behavior != "always_invoice" {
		periodStart, periodEnd = sub.CurrentPeriodStart, sub.CurrentPeriodEnd
		for _, p := range plans {
			next := sub.CurrentPeriodEnd
			lines = append(lines, s.line(sub, p.new, p.newQty, p.newAmount(), false,
				fmt.Sprintf("%d × %s (at %d / month)", p.newQty, p.new.id, p.new.unitAmount),
				next, next.Add(period)))
		}
	}
	inv := invoiceJSON{
		ID: "upcoming_" + s.newID("in"), Object: "invoice", Status: "draft",
		BillingReason: "subscription_update", Customer: sub.Customer, Subscription: sub.ID,
		Currency: s.currency(sub), Created: s.now().Unix(),
		PeriodStart: periodStart.Unix(), PeriodEnd: periodEnd.Unix(),
		Lines: newList("/v1/invoices/upcoming/lines", lines),
	}
	s.applyTotals(sub, &inv) // coupons, tax rates, the customer balance (invoice.go)
	return inv
}

// itemPlan is one subscription item before and after a previewed change.
type itemPlan struct {
	old, new       price
	oldQty, newQty int64
}

func (p itemPlan) oldAmount() int64 { return p.old.unitAmount * p.oldQty }
func (p itemPlan) newAmount() int64 { return p.new.unitAmount * p.newQty }
func (p itemPlan) changed() bool    { return p.old.id != p.new.id || p.oldQty != p.newQty }

// netProration is what changes prorate at at: the sum of the net of every
// changed item, as previewInvoice's lines add up. Callers hold s.mu.
func (s *Server) netProration(sub *Subscription, changes []itemChange, at time.Time) int64 {
	remaining := int64(sub.CurrentPeriodEnd.Sub(at) / time.Second)
	length := int64(sub.CurrentPeriodEnd.Sub(sub.CurrentPeriodStart) / time.Second)
	var net int64
	for _, p := range s.itemPlans(sub, changes) {
		if p.changed() {
			net += prorate(p.newAmount()-p.oldAmount(), remaining, length)
		}
	}
	return net
}

// itemPlans pairs every item of sub with what changes would make of it.
func (s *Server) itemPlans(sub *Subscription, changes []itemChange) []itemPlan {
	plans := make([]itemPlan, len(sub.Items))
	for i, it := range sub.Items {
		pr := s.prices[it.PriceID]
		plans[i] = itemPlan{old: pr, new: pr, oldQty: it.Quantity, newQty: it.Quantity}
	}
	for _, c := range changes {
		plans[c.index].new, plans[c.index].newQty = c.price, c.quantity
	}
	return plans
}

// prorationLines are the proration lines of one changed item and their
// sum, net (see previewInvoice).
func (s *Server) prorationLines(sub *Subscription, p itemPlan, oneLine bool, remaining, length int64, at time.Time) ([]lineJSON, int64) {
	net := prorate(p.newAmount()-p.oldAmount(), remaining, length)
	end := sub.CurrentPeriodEnd
	day := at.UTC().Format("02 Jan 2006")
	if oneLine {
		return []lineJSON{s.line(sub, p.new, p.newQty, net, true,
			fmt.Sprintf("Proration for %d × %s → %d × %s after %s", p.oldQty, p.old.id, p.newQty, p.new.id, day), at, end)}, net
	}
	credit := -prorate(p.oldAmount(), remaining, length)
	return []lineJSON{
		s.line(sub, p.old, p.oldQty, credit, true, fmt.Sprintf("Unused time on %d × %s after %s", p.oldQty, p.old.id, day), at, end),
		s.line(sub, p.new, p.newQty, net-credit, true, fmt.Sprintf("Remaining time on %d × %s after %s", p.newQty, p.new.id, day), at, end),
	}, net
}

func (s *Server) line(sub *Subscription, pr price, qty, amount int64, proration bool, description string, from, to time.Time) lineJSON {
	return lineJSON{
		ID: "il_tmp_" + s.newID("li"), Object: "line_item", Amount: amount, Currency: pr.currency,
		Description: description, Period: periodJSON{Start: from.Unix(), End: to.Unix()},
		Price: toPriceJSON(pr), Proration: proration, Quantity: qty,
		Subscription: sub.ID, Type: "subscription",
	}
}

// prorate is amount × num / den rounded half away from zero (den > 0).
// Amounts are cents and num ≤ den is at most a period in seconds, so the
// product stays far from overflowing.
func prorate(amount, num, den int64) int64 {
	if den <= 0 {
		return 0
	}
	n := amount * num
	if n < 0 {
		return -((-n + den/2) / den)
	}
	return (n + den/2) / den
}

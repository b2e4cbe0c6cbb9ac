package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The first call's quote: the terms a confirmation binds, priced by the
// provider, and the provider request they make (the same request its
// second call sends).

// quote asks the provider what the change costs and returns the terms the
// summary will state. Keeping the plan (cancelling the scheduled change)
// costs nothing and needs no preview.
func (s *Service) quote(ctx context.Context, acct Account, from Plan, w wanted, req ChangeRequest, now time.Time) (Terms, error) {
	terms := termsFor(acct.Subscription, from, w, req, now.Truncate(time.Second))
	terms.Livemode = s.livemode
	if !terms.prices() {
		return terms, nil
	}
	to := w.to
	change := planChangeFor(acct, terms)
	preview, err := s.payments.PreviewPlanChange(ctx, change)
	if err != nil {
		return Terms{}, providerError("preview plan change", err)
	}
	if preview.Currency != "" && preview.Currency != to.Currency {
		return Terms{}, wrapErr(CodeInternal, "internal error",
			fmt.Errorf("preview currency %q differs from catalog %q", preview.Currency, to.Currency))
	}
	if err := priced(&terms, change, preview); err != nil {
		return Terms{}, wrapErr(CodeInternal, "internal error", fmt.Errorf("quote: %w", err))
	}
	return terms, nil
}

// priced sets the amounts of the preview on t: what is charged now and its
// parts (upgrades), the credit carried to the next invoice (downgrades now),
// or what the renewal at the new price will charge (at the period's end).
func priced(t *Terms, change PlanChange, p Preview) error {
	switch {
	case change.AtPeriodEnd:
		if p.AtRenewal == nil {
			return errors.New("the preview of a period-end change has no renewal invoice")
		}
		renewal := *p.AtRenewal
		if err := checkParts(&renewal); err != nil {
			return err
		}
		t.AtRenewal = &renewal
		return nil
	case change.ChargeNow:
		t.AmountDueCents = max(p.AmountDueNowCents, 0)
		return amountParts(t, p)
	default:
		t.CreditCents = max(-p.ProrationCents, 0)
		return nil
	}
}

// planChangeFor is the provider request a proposal quotes and its
// confirmation executes, from the terms (the price the person agreed to,
// not the catalog's: a retry of the same key must be the same request even
// if the catalog changed). Upgrades charge the prorated difference now and
// fail if the payment fails; downgrades credit it on the next invoice, or
// wait for the period's end.
func planChangeFor(acct Account, t Terms) PlanChange {
	change := PlanChange{
		CustomerID:     acct.Org.StripeCustomerID,
		SubscriptionID: acct.Subscription.StripeSubscriptionID,
		ItemID:         acct.Subscription.StripeItemID,
		FromPriceID:    t.FromPriceID,
		NewPriceID:     t.ToPriceID,
		FromQuantity:   t.seatsFrom(),
		Quantity:       t.seatsTo(),
		ProrationDate:  t.ProrationDate,
		ChargeNow:      t.chargesNow(),
		Cancellation:   t.Cancellation,
		CancelReason:   t.CancelReason,
		CancelComment:  t.CancelComment,
		KeepPlan:       keepsPlan(t),
	}
	if t.AtPeriodEnd && !keepsPlan(t) {
		change.AtPeriodEnd, change.PeriodEnd = true, t.NextChargeAt
	}
	return change
}

// termsFor are the terms of the change w from the plan from, before the
// provider priced it.
func termsFor(sub Subscription, from Plan, w wanted, req ChangeRequest, prorationDate time.Time) Terms {
	to, n := w.to, w.seats
	t := Terms{
		FromPlan: from.ID, ToPlan: to.ID,
		FromPriceID: from.StripePriceID, ToPriceID: to.StripePriceID,
		FromAmountCents: from.AmountCents, ToAmountCents: to.AmountCents, Quantity: seats(sub.Quantity),
		Currency: to.Currency, ProrationDate: prorationDate,
		SubscriptionVer: sub.Version, NextChargeAt: sub.CurrentPeriodEnd, FromStatus: sub.Status,
		Cancels: sub.Scheduled, FromCancelAtPeriodEnd: sub.CancelAtPeriodEnd,
		Cancellation: w.cancellation,
	}
	if w.cancellation == CancelNow || w.cancellation == CancelAtPeriodEnd {
		t.CancelReason, t.CancelComment = req.Reason, req.Comment
	}
	if n != t.Quantity {
		t.ToQuantity = n
	}
	t.AtPeriodEnd = req.atPeriodEnd() && w.cancellation == "" && (from.ID != to.ID || n != t.Quantity)
	return t
}

// prices reports whether the provider must price t: a change that moves
// money now or at the renewal. Keeping the plan, cancelling at the
// period's end and resuming move none.
func (t Terms) prices() bool {
	return !keepsPlan(t) && t.Cancellation != CancelAtPeriodEnd && t.Cancellation != Resume
}

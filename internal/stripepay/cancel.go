package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
)

// Cancelling and resuming (contract §15), as Stripe's API reference
// describes them:
//
//   - at the period's end: an update with cancel_at_period_end true (and
//     the customer's cancellation_details); nothing is prorated. Stripe
//     refuses it on a subscription a schedule manages, so ApplyPlanChange
//     releases an attached schedule first, as for any change made now;
//   - resuming: an update with cancel_at_period_end false;
//   - now: DELETE /v1/subscriptions/{id} with prorate and invoice_now: a
//     final invoice credits the unused time, and its negative total goes
//     to the customer's balance (a credit, not a refund). Stripe ignores
//     Idempotency-Key on DELETE, and answers a second DELETE 404: that is
//     an outcome billing must read back (the first may have been made),
//     never "nothing was done".

// previewCancelNow previews cancelling now: the proration lines of the
// final invoice, which credit the unused time.
func (p *Provider) previewCancelNow(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	params := &stripe.InvoiceCreatePreviewParams{
		Customer:     stripe.String(change.CustomerID),
		Subscription: stripe.String(change.SubscriptionID),
		SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
			CancelNow:         stripe.Bool(true),
			ProrationBehavior: stripe.String("create_prorations"),
			ProrationDate:     unixParam(change.ProrationDate),
		},
	}
	inv, err := request(ctx, p, "preview cancellation", &params.Params, "", func() (*stripe.Invoice, error) {
		return p.previewInvoice(params)
	})
	if err != nil {
		return billing.Preview{}, err
	}
	return previewFromInvoice(inv, false)
}

// cancelNow cancels the subscription at once, crediting the unused time.
func (p *Provider) cancelNow(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	params := &stripe.SubscriptionCancelParams{Prorate: stripe.Bool(true), InvoiceNow: stripe.Bool(true)}
	params.CancellationDetails = cancellationDetails(change)
	params.AddExpand("latest_invoice") // the final invoice: the credit of the unused time
	sub, err := request(ctx, p, "cancel subscription", &params.Params, idempotencyKey, func() (*stripe.Subscription, error) {
		var w wireSubscription
		if err := p.callSlim(http.MethodDelete, stripe.FormatURLPath("/v1/subscriptions/%s", change.SubscriptionID), params, &w); err != nil {
			return nil, err
		}
		return w.subscription()
	})
	var se *stripe.Error
	if err != nil && errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
		// Already cancelled (an earlier attempt whose answer was lost) or
		// gone: what happened is for the read back to say.
		return billing.AppliedChange{}, fmt.Errorf("%w: stripe cancel subscription: 404, already cancelled or gone", billing.ErrUnavailable)
	}
	if err != nil {
		return billing.AppliedChange{}, err
	}
	applied := appliedOf(sub, change)
	applied.Invoice = invoiceOf(sub.LatestInvoice)
	return applied, nil
}

// updateCancellation sets cancel_at_period_end: true cancels at the
// period's end, false resumes.
func (p *Provider) updateCancellation(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	params := &stripe.SubscriptionParams{CancelAtPeriodEnd: stripe.Bool(change.Cancellation == billing.CancelAtPeriodEnd)}
	if change.Cancellation == billing.CancelAtPeriodEnd {
		if d := cancellationDetails(change); d != nil {
			params.CancellationDetails = &stripe.SubscriptionCancellationDetailsParams{Feedback: d.Feedback, Comment: d.Comment}
		}
	}
	if change.ConfirmationID != "" {
		params.AddMetadata(MetadataConfirmationID, change.ConfirmationID)
	}
	sub, err := request(ctx, p, "update subscription cancellation", &params.Params, idempotencyKey, func() (*stripe.Subscription, error) {
		return p.subscriptionCall(http.MethodPost, change.SubscriptionID, params)
	})
	if err != nil {
		return billing.AppliedChange{}, err
	}
	return appliedOf(sub, change), nil
}

// cancellationDetails are the customer's reason and comment, nil for none.
func cancellationDetails(change billing.PlanChange) *stripe.SubscriptionCancelCancellationDetailsParams {
	if change.CancelReason == "" && change.CancelComment == "" {
		return nil
	}
	d := &stripe.SubscriptionCancelCancellationDetailsParams{}
	if change.CancelReason != "" {
		d.Feedback = stripe.String(change.CancelReason)
	}
	if change.CancelComment != "" {
		d.Comment = stripe.String(change.CancelComment)
	}
	return d
}

// appliedOf is the subscription sub after change, as billing records it.
func appliedOf(sub *stripe.Subscription, change billing.PlanChange) billing.AppliedChange {
	applied := billing.AppliedChange{Status: string(sub.Status), CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
		ItemID: change.ItemID, Quantity: firstItemQuantity(sub), CancelAtPeriodEnd: sub.CancelAtPeriodEnd,
		CanceledAt: unixTime(sub.CanceledAt)}
	if sub.Items != nil && len(sub.Items.Data) > 0 && sub.Items.Data[0].Price != nil {
		applied.ItemID, applied.PriceID = sub.Items.Data[0].ID, sub.Items.Data[0].Price.ID
	}
	return applied
}

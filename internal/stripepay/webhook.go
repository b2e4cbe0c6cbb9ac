package stripepay

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/billingd/billingd/billing"
)

// ErrBadSignature: the payload is not a Stripe event signed with the
// endpoint's secret (or is older than the tolerance, five minutes).
var ErrBadSignature = errors.New("bad Stripe webhook signature")

// ParseSubscriptionEvent authenticates a webhook payload and, for
// customer.subscription.updated and .deleted, returns the change. ok is false
// for any other event type, which billingd acknowledges and ignores.
func ParseSubscriptionEvent(payload []byte, signatureHeader, secret string) (ev billing.SubscriptionEvent, ok bool, err error) {
	// Stripe sends events in the API version of the webhook endpoint, which
	// an operator may set differently from stripe-go's pinned version. The
	// fields read here (id, status, items, current_period_end) have the same
	// shape in every version since 2020, so a mismatch is tolerated rather
	// than dropping every event of such an endpoint.
	event, err := webhook.ConstructEventWithOptions(payload, signatureHeader, secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		return billing.SubscriptionEvent{}, false, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	deleted := event.Type == "customer.subscription.deleted"
	if event.Type != "customer.subscription.updated" && !deleted {
		return billing.SubscriptionEvent{}, false, nil
	}
	var sub stripe.Subscription
	if event.Data == nil || json.Unmarshal(event.Data.Raw, &sub) != nil || sub.ID == "" {
		return billing.SubscriptionEvent{}, false, fmt.Errorf("decode %s event %s: not a subscription", event.Type, event.ID)
	}
	ev = billing.SubscriptionEvent{
		EventID: event.ID, Created: time.Unix(event.Created, 0).UTC(), Deleted: deleted,
		SubscriptionID: sub.ID, Status: string(sub.Status),
	}
	if sub.CurrentPeriodEnd > 0 {
		ev.CurrentPeriodEnd = time.Unix(sub.CurrentPeriodEnd, 0).UTC()
	}
	if sub.Items != nil && len(sub.Items.Data) > 0 {
		item := sub.Items.Data[0]
		ev.ItemID = item.ID
		if item.Price != nil {
			ev.PriceID = item.Price.ID
		}
	}
	return ev, true, nil
}

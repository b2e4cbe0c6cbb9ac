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

// ParseSubscriptionEvent authenticates a webhook payload and returns, for
// customer.subscription.updated and .deleted, the change, and for an event
// about a subscription schedule (subscription_schedule.created, .updated,
// .released, .canceled, .completed, .aborted, .expiring: Stripe's list) the
// subscription it manages, or managed until released, with SubscriptionID
// only: a schedule event is a hint to read the subscription again (a
// scheduled change was set, released, or applied at a renewal). ok is
// false for any other event type, which billingd acknowledges and ignores.
func ParseSubscriptionEvent(payload []byte, signatureHeader, secret string) (ev billing.SubscriptionEvent, ok bool, err error) {
	// Stripe sends events in the API version of the webhook endpoint, which
	// an operator may set differently from stripe-go's pinned version
	// (2024-06-20). The fields read here (id, status, metadata, items' id and
	// price) have the same shape from 2020-08-27 through 2025-10-29.clover;
	// current_period_end moved to the items in 2025-03-31.basil and is read
	// from either place (periodEnd). So a mismatch is tolerated rather than
	// dropping every event of such an endpoint.
	event, err := webhook.ConstructEventWithOptions(payload, signatureHeader, secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		return billing.SubscriptionEvent{}, false, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if scheduleEvents[event.Type] {
		return parseScheduleEvent(event)
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
		ConfirmationID: sub.Metadata[MetadataConfirmationID],
	}
	if end := periodEnd(sub, event.Data.Raw); end > 0 {
		ev.CurrentPeriodEnd = time.Unix(end, 0).UTC()
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

// periodEnd is the subscription's current period end: on the subscription
// itself up to API version 2024-12-18.acacia, on its items (the first item's;
// a billingd subscription has one) from 2025-03-31.basil on, where
// stripe-go v79's types have no field for it.
func periodEnd(sub stripe.Subscription, raw json.RawMessage) int64 {
	if sub.CurrentPeriodEnd > 0 {
		return sub.CurrentPeriodEnd
	}
	var basil struct {
		Items struct {
			Data []struct {
				CurrentPeriodEnd int64 `json:"current_period_end"`
			} `json:"data"`
		} `json:"items"`
	}
	if json.Unmarshal(raw, &basil) != nil || len(basil.Items.Data) == 0 {
		return 0
	}
	return basil.Items.Data[0].CurrentPeriodEnd
}

// scheduleEvents are the subscription_schedule events Stripe documents.
var scheduleEvents = map[stripe.EventType]bool{
	stripe.EventTypeSubscriptionScheduleAborted:   true,
	stripe.EventTypeSubscriptionScheduleCanceled:  true,
	stripe.EventTypeSubscriptionScheduleCompleted: true,
	stripe.EventTypeSubscriptionScheduleCreated:   true,
	stripe.EventTypeSubscriptionScheduleExpiring:  true,
	stripe.EventTypeSubscriptionScheduleReleased:  true,
	stripe.EventTypeSubscriptionScheduleUpdated:   true,
}

// parseScheduleEvent names the subscription a schedule event is about: the
// schedule's subscription or, once released, its released_subscription. A
// schedule that names neither (one that never had a subscription) is
// ignored.
func parseScheduleEvent(event stripe.Event) (billing.SubscriptionEvent, bool, error) {
	var sch stripe.SubscriptionSchedule
	if event.Data == nil || json.Unmarshal(event.Data.Raw, &sch) != nil || sch.ID == "" {
		return billing.SubscriptionEvent{}, false, fmt.Errorf("decode %s event %s: not a subscription schedule", event.Type, event.ID)
	}
	var subID string
	switch {
	case sch.Subscription != nil && sch.Subscription.ID != "":
		subID = sch.Subscription.ID
	case sch.ReleasedSubscription != nil && sch.ReleasedSubscription.ID != "":
		subID = sch.ReleasedSubscription.ID
	default:
		return billing.SubscriptionEvent{}, false, nil
	}
	return billing.SubscriptionEvent{EventID: event.ID, Created: time.Unix(event.Created, 0).UTC(), SubscriptionID: subID}, true, nil
}

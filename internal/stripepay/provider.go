package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
)

// PreviewPlanChange asks Stripe what change would cost, as of
// change.ProrationDate, without changing anything. A change AtPeriodEnd is
// previewed as the renewal invoice at the new price (proration_behavior
// none: Stripe's upcoming invoice with nothing prorated), which is what
// the schedule's next phase will charge, as far as Stripe knows today.
func (p *Provider) PreviewPlanChange(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	switch {
	case change.AtPeriodEnd:
		return p.previewRenewal(ctx, change)
	case change.Cancellation == billing.CancelNow:
		return p.previewCancelNow(ctx, change)
	}
	params := &stripe.InvoiceCreatePreviewParams{
		Customer:     stripe.String(change.CustomerID),
		Subscription: stripe.String(change.SubscriptionID),
		SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
			Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
				ID:       stripe.String(change.ItemID),
				Price:    stripe.String(change.NewPriceID),
				Quantity: stripe.Int64(seats(change)),
			}},
			ProrationBehavior: stripe.String(prorationBehavior(change.ChargeNow)),
			ProrationDate:     unixParam(change.ProrationDate),
		},
	}
	inv, err := request(ctx, p, "preview invoice", &params.Params, "", func() (*stripe.Invoice, error) {
		return p.previewInvoice(params)
	})
	if err != nil {
		return billing.Preview{}, err
	}
	return previewFromInvoice(inv, change.ChargeNow)
}

// previewRenewal previews change.NewPriceID on the subscription's next
// (renewal) invoice: nothing now, AtRenewal its amounts.
func (p *Provider) previewRenewal(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	params := &stripe.InvoiceCreatePreviewParams{
		Customer:     stripe.String(change.CustomerID),
		Subscription: stripe.String(change.SubscriptionID),
		SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
			Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
				ID:       stripe.String(change.ItemID),
				Price:    stripe.String(change.NewPriceID),
				Quantity: stripe.Int64(seats(change)),
			}},
			ProrationBehavior: stripe.String("none"),
		},
	}
	inv, err := request(ctx, p, "preview renewal invoice", &params.Params, "", func() (*stripe.Invoice, error) {
		return p.previewInvoice(params)
	})
	if err != nil {
		return billing.Preview{}, err
	}
	renewal := &billing.Amounts{AmountDueCents: inv.AmountDue}
	renewal.SubtotalCents, renewal.DiscountCents, renewal.TaxCents, renewal.CreditAppliedCents = amountParts(inv)
	return billing.Preview{Currency: string(inv.Currency), AtRenewal: renewal}, nil
}

// ApplyPlanChange makes change at Stripe.
//
// AtPeriodEnd sets the phases of a schedule, the attached one
// (change.Attached) or a new one made from the subscription, so that its
// next phase, from change.PeriodEnd, is the new price (scheduleChange): one
// request that either replaces the change scheduled before or leaves it.
// Any other change releases the attached schedule first, so that no phase
// of it undoes the change at the period's end; KeepPlan does only that,
// then reads the subscription back; the rest swaps the subscription item's
// price now.
//
// Each request has its own idempotency key derived from idempotencyKey, so
// a retry with the same key makes Stripe replay every step already made
// instead of making it again. The confirmation id goes into the
// subscription's metadata, or the schedule's (billingd_confirmation_id),
// for tracing and for settling an unknown outcome by reading it back; a
// request id would differ between a request and its retry, and Stripe
// refuses a replayed key whose parameters differ.
func (p *Provider) ApplyPlanChange(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	keys := []string{idempotencyKey}
	release := change.Attached != nil && !change.AtPeriodEnd
	if release {
		keys = append(keys, releaseKey(idempotencyKey, change.Attached.ID))
	}
	if change.AtPeriodEnd {
		keys = append(keys, idempotencyKey+":schedule", idempotencyKey+":phases")
	}
	for _, k := range keys {
		if err := checkIdempotencyKey(k); err != nil {
			return billing.AppliedChange{}, fmt.Errorf("stripe plan change: %w", err)
		}
	}
	if change.AtPeriodEnd && !change.KeepPlan && (change.FromPriceID == "" || change.PeriodEnd.IsZero()) {
		// Checked before anything is sent: Stripe would refuse the phases
		// only after the schedule was made.
		return billing.AppliedChange{}, errors.New("stripe plan change at period end: no current price or period end")
	}
	at := billing.StepEvent{Confirmation: change.ConfirmationID, Subscription: change.SubscriptionID}
	if release {
		p.steps.At(ctx, billing.StepRelease, at)
		if err := p.releaseSchedule(ctx, change.Attached.ID, releaseKey(idempotencyKey, change.Attached.ID)); err != nil {
			return billing.AppliedChange{}, err
		}
	}
	switch {
	case change.KeepPlan:
		p.steps.At(ctx, billing.StepKeep, at)
		return p.afterRelease(ctx, change.SubscriptionID)
	case change.AtPeriodEnd:
		return p.scheduleChange(ctx, change, idempotencyKey)
	case change.Cancellation == billing.CancelNow:
		return p.cancelNow(ctx, change, idempotencyKey)
	case change.Cancellation != "":
		return p.updateCancellation(ctx, change, idempotencyKey)
	}
	return p.updateSubscription(ctx, change, idempotencyKey)
}

// request sends one Stripe request, do, with params bound to the request
// timeout (stripe-go's retries included: see bound) and, when key is set,
// that idempotency key; its error is classified as op's.
func request[T any](ctx context.Context, p *Provider, op string, params *stripe.Params, key string, do func() (T, error)) (T, error) {
	if key != "" {
		params.SetIdempotencyKey(key)
	}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	v, err := do()
	if err != nil {
		var zero T
		return zero, classify(op, err)
	}
	return v, nil
}

func releaseKey(key, scheduleID string) string { return key + ":release:" + scheduleID }

// afterRelease reads the subscription once its schedule is released
// (Stripe's release answers with the schedule, whose released_subscription
// cannot be expanded): billing must see the price it is on, since a
// renewal may have made the scheduled change just before the release.
func (p *Provider) afterRelease(ctx context.Context, subscriptionID string) (billing.AppliedChange, error) {
	params := &stripe.SubscriptionParams{}
	rctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = rctx
	sub, err := p.subscriptionCall(http.MethodGet, subscriptionID, params)
	if err != nil {
		// The release is made: whatever Stripe answered the read (a 429,
		// a 4xx), what billing does not know is only where the
		// subscription stands. Unknown, never "nothing was done".
		return billing.AppliedChange{}, fmt.Errorf("%w: read subscription after release: %v", billing.ErrUnavailable,
			classify("read subscription after release", err))
	}
	applied := billing.AppliedChange{Status: string(sub.Status), CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd)}
	if sub.Items != nil && len(sub.Items.Data) > 0 && sub.Items.Data[0].Price != nil {
		applied.ItemID, applied.PriceID = sub.Items.Data[0].ID, sub.Items.Data[0].Price.ID
	}
	applied.Quantity = firstItemQuantity(sub)
	return applied, nil
}

// updateSubscription swaps the subscription item's price now.
func (p *Provider) updateSubscription(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	params := &stripe.SubscriptionParams{
		Items: []*stripe.SubscriptionItemsParams{{
			ID:       stripe.String(change.ItemID),
			Price:    stripe.String(change.NewPriceID),
			Quantity: stripe.Int64(seats(change)), // a new price alone resets it to one
		}},
		ProrationBehavior: stripe.String(prorationBehavior(change.ChargeNow)),
		ProrationDate:     unixParam(change.ProrationDate),
		PaymentBehavior:   stripe.String(paymentBehavior(change.ChargeNow)),
	}
	if change.ConfirmationID != "" {
		params.AddMetadata(MetadataConfirmationID, change.ConfirmationID)
	}
	// The invoice the update made, with its amounts: what was charged.
	params.Expand = []*string{stripe.String("latest_invoice")}
	sub, err := request(ctx, p, "update subscription", &params.Params, idempotencyKey, func() (*stripe.Subscription, error) {
		return p.subscriptionCall(http.MethodPost, change.SubscriptionID, params)
	})
	if err != nil {
		return billing.AppliedChange{}, err
	}
	itemID, ok := firstItemID(sub)
	if !ok {
		// A price swap keeps the item's id, so the id we sent is still right.
		itemID = change.ItemID
	}
	applied := billing.AppliedChange{
		Status:           string(sub.Status),
		CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
		ItemID:           itemID,
		Quantity:         firstItemQuantity(sub),
	}
	if change.ChargeNow { // always_invoice: the latest invoice is the one this update made
		applied.Invoice = invoiceOf(sub.LatestInvoice)
	}
	return applied, nil
}

// releaseSchedule releases the schedule, leaving the subscription as it
// is. A schedule Stripe will not release because it is no longer active
// (released, canceled or completed: read back) counts as released: an
// earlier attempt under another key, or someone in Stripe's dashboard,
// already did it, or it ended.
func (p *Provider) releaseSchedule(ctx context.Context, scheduleID, key string) error {
	params := &stripe.SubscriptionScheduleReleaseParams{}
	params.SetIdempotencyKey(key)
	rctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = rctx
	_, err := p.api.SubscriptionSchedules.Release(scheduleID, params)
	if err == nil {
		return nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.Type != stripe.ErrorTypeInvalidRequest || se.HTTPStatusCode != http.StatusBadRequest {
		return classify("release subscription schedule", err)
	}
	sch, gerr := p.readSchedule(ctx, scheduleID)
	if gerr != nil {
		return gerr
	}
	if !live(sch) {
		return nil
	}
	return classify("release subscription schedule", err)
}

func (p *Provider) readSchedule(ctx context.Context, scheduleID string) (*stripe.SubscriptionSchedule, error) {
	params := &stripe.SubscriptionScheduleParams{}
	return request(ctx, p, "read subscription schedule", &params.Params, "", func() (*stripe.SubscriptionSchedule, error) {
		return p.api.SubscriptionSchedules.Get(scheduleID, params)
	})
}

// live reports whether the schedule still manages its subscription.
func live(sch *stripe.SubscriptionSchedule) bool {
	return sch.Status == stripe.SubscriptionScheduleStatusActive || sch.Status == stripe.SubscriptionScheduleStatusNotStarted
}

// scheduleChange attaches change to the subscription for change.PeriodEnd:
// a schedule made from the subscription (or the one attached: a change
// scheduled before, which this one replaces in the same request, or one an
// attempt that died made without its phases), whose phases are the current
// period on FromPriceID, then one period on NewPriceID, released at its end
// so that the subscription then renews on the new price as if changed by
// hand. Nothing is prorated.
func (p *Provider) scheduleChange(ctx context.Context, change billing.PlanChange, idempotencyKey string) (billing.AppliedChange, error) {
	var scheduleID string
	var phaseStart time.Time
	var current *stripe.SubscriptionSchedulePhase // the settings both phases keep
	if change.Attached != nil {
		scheduleID, phaseStart = change.Attached.ID, change.Attached.PhaseStart
		sch, err := p.readSchedule(ctx, scheduleID)
		if err != nil {
			return billing.AppliedChange{}, err
		}
		current = phaseAt(sch, phaseStart)
		if !live(sch) || current == nil || sch.CurrentPhase == nil || unixTime(sch.CurrentPhase.StartDate) != phaseStart ||
			!phaseOnPrice(current, change.FromPriceID) {
			// Released, renewed into another phase or changed since billing
			// read it: phases made from the earlier read could rewrite the
			// current one. Nothing is sent.
			return billing.AppliedChange{}, fmt.Errorf("%w: stripe subscription schedule %s changed since it was read",
				billing.ErrProviderRejected, scheduleID)
		}
	} else {
		p.steps.At(ctx, billing.StepScheduleCreate, billing.StepEvent{Confirmation: change.ConfirmationID, Subscription: change.SubscriptionID})
		sch, err := p.createSchedule(ctx, change.SubscriptionID, idempotencyKey+":schedule")
		if err != nil {
			return billing.AppliedChange{}, err
		}
		scheduleID = sch.ID
		switch {
		case sch.CurrentPhase != nil:
			phaseStart = unixTime(sch.CurrentPhase.StartDate)
		case len(sch.Phases) > 0:
			phaseStart = unixTime(sch.Phases[0].StartDate)
		}
		current = phaseAt(sch, phaseStart)
	}
	params := &stripe.SubscriptionScheduleParams{
		Phases: []*stripe.SubscriptionSchedulePhaseParams{
			{
				Items: []*stripe.SubscriptionSchedulePhaseItemParams{{
					Price: stripe.String(change.FromPriceID), Quantity: stripe.Int64(seatsFrom(change))}},
				StartDate: unixParam(phaseStart), // the current phase's: Stripe refuses another
				EndDate:   stripe.Int64(change.PeriodEnd.Unix()),
			},
			{
				Items: []*stripe.SubscriptionSchedulePhaseItemParams{{
					Price: stripe.String(change.NewPriceID), Quantity: stripe.Int64(seats(change))}},
				Iterations: stripe.Int64(1),
			},
		},
		EndBehavior:       stripe.String(string(stripe.SubscriptionScheduleEndBehaviorRelease)),
		ProrationBehavior: stripe.String("none"),
	}
	for _, ph := range params.Phases {
		keepSettings(ph, current)
	}
	if change.ConfirmationID != "" {
		params.AddMetadata(MetadataConfirmationID, change.ConfirmationID)
	}
	// The subscription's status, in the same answer.
	params.AddExpand("subscription")
	p.steps.At(ctx, billing.StepPhases, billing.StepEvent{Confirmation: change.ConfirmationID, Subscription: change.SubscriptionID})
	sch, err := request(ctx, p, "update subscription schedule", &params.Params, idempotencyKey+":phases", func() (*stripe.SubscriptionSchedule, error) {
		return p.api.SubscriptionSchedules.Update(scheduleID, params)
	})
	if err != nil {
		return billing.AppliedChange{}, err
	}
	applied := billing.AppliedChange{
		CurrentPeriodEnd: change.PeriodEnd,
		ItemID:           change.ItemID,
		Schedule:         scheduleOf(sch),
	}
	if sch.Subscription != nil {
		applied.Status = string(sch.Subscription.Status)
	}
	return applied, nil
}

// phaseAt is the schedule's phase that starts at start (the current one);
// nil if none.
func phaseAt(sch *stripe.SubscriptionSchedule, start time.Time) *stripe.SubscriptionSchedulePhase {
	for _, ph := range sch.Phases {
		if ph != nil && unixTime(ph.StartDate).Equal(start) {
			return ph
		}
	}
	return nil
}

// phaseOnPrice reports whether the phase's first item is on price.
func phaseOnPrice(ph *stripe.SubscriptionSchedulePhase, price string) bool {
	return len(ph.Items) > 0 && ph.Items[0] != nil && ph.Items[0].Price != nil && ph.Items[0].Price.ID == price
}

// keepSettings gives a phase the settings of the current one, which a
// schedule made from the subscription copied from it: its tax rates and
// automatic tax, discounts, payment method, collection method and invoice
// terms. Stripe replaces every
// phase on an update and applies a phase's settings to the subscription
// when it starts (the current one's at once), so a phase sent without them
// would drop the customer's tax or discount: only the price may change.
func keepSettings(ph *stripe.SubscriptionSchedulePhaseParams, current *stripe.SubscriptionSchedulePhase) {
	if current == nil {
		return
	}
	for _, tr := range current.DefaultTaxRates {
		if tr != nil {
			ph.DefaultTaxRates = append(ph.DefaultTaxRates, stripe.String(tr.ID))
		}
	}
	for _, d := range current.Discounts {
		switch {
		case d == nil:
		case d.Discount != nil && d.Discount.ID != "":
			ph.Discounts = append(ph.Discounts, &stripe.SubscriptionSchedulePhaseDiscountParams{Discount: stripe.String(d.Discount.ID)})
		case d.Coupon != nil && d.Coupon.ID != "":
			ph.Discounts = append(ph.Discounts, &stripe.SubscriptionSchedulePhaseDiscountParams{Coupon: stripe.String(d.Coupon.ID)})
		case d.PromotionCode != nil && d.PromotionCode.ID != "":
			ph.Discounts = append(ph.Discounts, &stripe.SubscriptionSchedulePhaseDiscountParams{PromotionCode: stripe.String(d.PromotionCode.ID)})
		}
	}
	if pm := current.DefaultPaymentMethod; pm != nil && pm.ID != "" {
		ph.DefaultPaymentMethod = stripe.String(pm.ID)
	}
	if cm := current.CollectionMethod; cm != nil && *cm != "" {
		ph.CollectionMethod = stripe.String(string(*cm))
	}
	if at := current.AutomaticTax; at != nil && at.Enabled {
		ph.AutomaticTax = &stripe.SubscriptionSchedulePhaseAutomaticTaxParams{Enabled: stripe.Bool(true)}
		if l := at.Liability; l != nil && l.Type != "" {
			ph.AutomaticTax.Liability = &stripe.SubscriptionSchedulePhaseAutomaticTaxLiabilityParams{Type: stripe.String(string(l.Type))}
			if l.Account != nil && l.Account.ID != "" {
				ph.AutomaticTax.Liability.Account = stripe.String(l.Account.ID)
			}
		}
	}
	if is := current.InvoiceSettings; is != nil && (is.DaysUntilDue > 0 || len(is.AccountTaxIDs) > 0) {
		ph.InvoiceSettings = &stripe.SubscriptionSchedulePhaseInvoiceSettingsParams{}
		if is.DaysUntilDue > 0 {
			ph.InvoiceSettings.DaysUntilDue = stripe.Int64(is.DaysUntilDue)
		}
		for _, id := range is.AccountTaxIDs {
			if id != nil && id.ID != "" {
				ph.InvoiceSettings.AccountTaxIDs = append(ph.InvoiceSettings.AccountTaxIDs, stripe.String(id.ID))
			}
		}
	}
	if len(current.Items) > 0 && current.Items[0] != nil && len(ph.Items) > 0 {
		for _, tr := range current.Items[0].TaxRates {
			if tr != nil {
				ph.Items[0].TaxRates = append(ph.Items[0].TaxRates, stripe.String(tr.ID))
			}
		}
	}
}

func (p *Provider) createSchedule(ctx context.Context, subscriptionID, key string) (*stripe.SubscriptionSchedule, error) {
	params := &stripe.SubscriptionScheduleParams{FromSubscription: stripe.String(subscriptionID)}
	sch, err := request(ctx, p, "create subscription schedule", &params.Params, key, func() (*stripe.SubscriptionSchedule, error) {
		return p.api.SubscriptionSchedules.New(params)
	})
	if err != nil {
		return nil, err
	}
	return sch, nil
}

// scheduleOf is what billing states of a schedule: its id, the
// confirmation named in its metadata, its current phase's start and the
// phase after it (the first that starts at or after the current phase's
// end), if any. nil for no schedule.
func scheduleOf(sch *stripe.SubscriptionSchedule) *billing.ProviderSchedule {
	if sch == nil || sch.ID == "" {
		return nil
	}
	out := &billing.ProviderSchedule{ID: sch.ID, ConfirmationID: sch.Metadata[MetadataConfirmationID],
		Opaque: sch.EndBehavior == stripe.SubscriptionScheduleEndBehaviorCancel}
	if sch.CurrentPhase == nil {
		return out
	}
	out.PhaseStart = unixTime(sch.CurrentPhase.StartDate)
	future := 0
	for _, ph := range sch.Phases {
		if ph == nil || ph.StartDate < sch.CurrentPhase.EndDate {
			continue
		}
		future++
		if future > 1 || len(ph.Items) == 0 || ph.Items[0].Price == nil {
			// billingd's own schedules have one future phase, one price.
			out.Opaque = true
			continue
		}
		out.NextPriceID, out.NextAt, out.NextQuantity = ph.Items[0].Price.ID, unixTime(ph.StartDate), phaseQuantity(ph)
		// billingd states a change of plan or seats only: one item, no
		// trial.
		out.Opaque = out.Opaque || len(ph.Items) != 1 || ph.TrialEnd != 0
	}
	return out
}

// invoiceOf is what billing states of an (expanded) invoice; nil when
// Stripe sent none, or only its id.
func invoiceOf(inv *stripe.Invoice) *billing.Invoice {
	if inv == nil || inv.ID == "" || inv.Currency == "" {
		return nil
	}
	out := &billing.Invoice{ID: inv.ID, AmountDueCents: inv.AmountDue, Currency: string(inv.Currency),
		BillingReason: string(inv.BillingReason), Created: unixTime(inv.Created), CreditedCents: max(-inv.Total, 0)}
	if inv.SubscriptionDetails != nil {
		out.ConfirmationID = inv.SubscriptionDetails.Metadata[MetadataConfirmationID]
	}
	if inv.Lines != nil {
		for _, l := range inv.Lines.Data {
			if l.Proration && l.Period != nil && l.Price != nil {
				out.Prorations = append(out.Prorations, billing.ProrationLine{PriceID: l.Price.ID, Start: unixTime(l.Period.Start)})
			}
		}
	}
	return out
}

// SubscriptionInvoices lists the subscription's invoices created at or
// after since, newest first (Stripe's order), one page of at most 20: a
// change settled after the fact looks for its own among them.
func (p *Provider) SubscriptionInvoices(ctx context.Context, subscriptionID string, since time.Time) ([]billing.Invoice, error) {
	params := &stripe.InvoiceListParams{Subscription: stripe.String(subscriptionID),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	params.Limit = stripe.Int64(20)
	params.Single = true // one page: the change's invoice is among the first
	ctx, cancel := p.bound(ctx)
	defer cancel()
	params.Context = ctx
	it := p.api.Invoices.List(params)
	var out []billing.Invoice
	for it.Next() {
		if inv := invoiceOf(it.Invoice()); inv != nil {
			out = append(out, *inv)
		}
	}
	if err := it.Err(); err != nil {
		return nil, classify("list invoices", err)
	}
	return out, nil
}

// ReadSubscription reads the subscription as Stripe has it now, with its
// latest invoice and its schedule: before a change is sent, to settle one
// whose outcome is unknown, and on a webhook.
func (p *Provider) ReadSubscription(ctx context.Context, subscriptionID string) (billing.ProviderSubscription, error) {
	params := &stripe.SubscriptionParams{}
	params.Expand = []*string{stripe.String("latest_invoice"), stripe.String("schedule")}
	sub, err := request(ctx, p, "read subscription", &params.Params, "", func() (*stripe.Subscription, error) {
		return p.subscriptionCall(http.MethodGet, subscriptionID, params)
	})
	if err != nil {
		return billing.ProviderSubscription{}, err
	}
	state := billing.ProviderSubscription{
		Status:            string(sub.Status),
		CancelAtPeriodEnd: sub.CancelAtPeriodEnd,
		CanceledAt:        unixTime(sub.CanceledAt),
		CurrentPeriodEnd:  unixTime(sub.CurrentPeriodEnd),
		ConfirmationID:    sub.Metadata[MetadataConfirmationID],
		LatestInvoice:     invoiceOf(sub.LatestInvoice),
	}
	// Stripe detaches a schedule once it is released or canceled; one
	// that has ended some other way manages nothing either.
	if sch := sub.Schedule; sch != nil && sch.ID != "" && (sch.Status == "" || live(sch)) {
		state.Schedule = scheduleOf(sch)
	}
	if sub.Items != nil && len(sub.Items.Data) > 0 {
		item := sub.Items.Data[0]
		state.Items = len(sub.Items.Data)
		if sub.Items.HasMore {
			state.Items++ // more than one page: more than one item
		}
		state.ItemID, state.Quantity = item.ID, item.Quantity
		if item.Price != nil {
			state.PriceID = item.Price.ID
		}
	}
	return state, nil
}

// MetadataConfirmationID is the subscription metadata key naming the
// confirmation that last changed the plan.
const MetadataConfirmationID = "billingd_confirmation_id"

// CreateCustomer creates a customer and subscribes it to c.PriceID. Each of
// the two requests has its own key derived from idempotencyKey, so a retry
// after a failure between them finds the customer already made (Stripe
// replays it) and only then creates the subscription.
func (p *Provider) CreateCustomer(ctx context.Context, c billing.NewCustomer, idempotencyKey string) (billing.CreatedCustomer, error) {
	// The longer of the two derived keys must fit Stripe's limit.
	if err := checkIdempotencyKey(idempotencyKey + ":subscription"); err != nil {
		return billing.CreatedCustomer{}, fmt.Errorf("stripe create customer: %w", err)
	}
	cust, err := p.createCustomer(ctx, c, idempotencyKey+":customer")
	if err != nil {
		return billing.CreatedCustomer{}, err
	}
	sub, err := p.createSubscription(ctx, cust.ID, c, idempotencyKey+":subscription")
	if err != nil {
		return billing.CreatedCustomer{}, err
	}
	itemID, ok := firstItemID(sub)
	if !ok {
		return billing.CreatedCustomer{}, fmt.Errorf("stripe create subscription %s: response has no items", sub.ID)
	}
	return billing.CreatedCustomer{
		CustomerID:       cust.ID,
		SubscriptionID:   sub.ID,
		ItemID:           itemID,
		Status:           string(sub.Status),
		CurrentPeriodEnd: unixTime(sub.CurrentPeriodEnd),
	}, nil
}

func (p *Provider) createCustomer(ctx context.Context, c billing.NewCustomer, key string) (*stripe.Customer, error) {
	params := &stripe.CustomerParams{
		Name:  stripe.String(c.Name),
		Email: stripe.String(c.Email),
	}
	params.AddMetadata("org_id", c.OrgID)
	cust, err := request(ctx, p, "create customer", &params.Params, key, func() (*stripe.Customer, error) {
		return p.api.Customers.New(params)
	})
	if err != nil {
		return nil, err
	}
	return cust, nil
}

func (p *Provider) createSubscription(ctx context.Context, customerID string, c billing.NewCustomer, key string) (*stripe.Subscription, error) {
	params := &stripe.SubscriptionParams{
		Customer: stripe.String(customerID),
		Items:    []*stripe.SubscriptionItemsParams{{Price: stripe.String(c.PriceID)}},
	}
	params.AddMetadata("org_id", c.OrgID)
	sub, err := request(ctx, p, "create subscription", &params.Params, key, func() (*stripe.Subscription, error) {
		return p.api.Subscriptions.New(params)
	})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// prorationBehavior: an upgrade (chargeNow) invoices and charges the
// prorated difference at once; a downgrade carries the credit to the next
// invoice.
func prorationBehavior(chargeNow bool) string {
	if chargeNow {
		return "always_invoice"
	}
	return "create_prorations"
}

// paymentBehavior: an upgrade must not take effect unless its invoice is
// paid, so a declined card refuses the whole update (402, nothing changed)
// instead of leaving the customer on the new plan with an open invoice.
//
// A downgrade with create_prorations creates no invoice, so no payment is
// attempted and the setting has no effect on today's Stripe; it is pinned to
// allow_incomplete (Stripe's default for updates) rather than
// error_if_incomplete so that, should a payment ever be involved, a failing
// card can never keep a customer on the more expensive plan.
func paymentBehavior(chargeNow bool) string {
	if chargeNow {
		return "error_if_incomplete"
	}
	return "allow_incomplete"
}

// previewFromInvoice maps a preview invoice to what billing quotes.
func previewFromInvoice(inv *stripe.Invoice, chargeNow bool) (billing.Preview, error) {
	proration, err := prorationCents(inv, chargeNow)
	if err != nil {
		return billing.Preview{}, err
	}
	p := billing.Preview{ProrationCents: proration, Currency: string(inv.Currency)}
	if chargeNow {
		// always_invoice: the previewed invoice is the one charged at once.
		// amount_due already nets tax, discounts and customer credit;
		// the parts say how (contract §6).
		p.AmountDueNowCents = inv.AmountDue
		p.SubtotalCents, p.DiscountCents, p.TaxCents, p.CreditAppliedCents = amountParts(inv)
	}
	return p, nil
}

// amountParts splits an invoice's amount_due into the parts Stripe's
// invoice object documents:
//
//   - subtotal: the lines before invoice-level discounts and exclusive tax;
//   - discount: what the discounts take off, subtotal + exclusive tax −
//     total (the sum of total_discount_amounts for invoice-level coupons;
//     derived from the totals so that a discount Stripe already folded into
//     the subtotal is not counted twice);
//   - tax: the exclusive tax of total_tax_amounts (inclusive tax is part of
//     the line amounts, so of the subtotal, and adds nothing);
//   - credit applied: the customer's credit balance (a negative
//     starting_balance) used, total − amount_due.
//
// Parts that do not add up to amount_due (a debt carried on the balance,
// say) are refused by billing rather than stated.
func amountParts(inv *stripe.Invoice) (subtotal, discount, tax, credit int64) {
	if inv.Total < 0 {
		// Nothing is charged; the credit goes to the balance: no parts.
		return 0, 0, 0, 0
	}
	for _, t := range inv.TotalTaxAmounts {
		if t != nil && !t.Inclusive {
			tax += t.Amount
		}
	}
	subtotal = inv.Subtotal
	discount = max(subtotal+tax-inv.Total, 0)
	if inv.StartingBalance < 0 {
		credit = max(inv.Total-inv.AmountDue, 0)
	}
	return subtotal, discount, tax, credit
}

// errLinesIncomplete: the preview's lines do not all fit in the embedded
// page, so their proration lines cannot be summed.
var errLinesIncomplete = errors.New("preview invoice lines are incomplete; cannot sum the proration")

// prorationCents is the net prorated amount of a preview invoice: the sum of
// the lines Stripe marks proration (the credit for the unused time on the old
// price plus the charge for the remaining time on the new one). Summing those
// lines, rather than reading an invoice total, leaves out what is not part of
// the plan change: the next period's full charge in a create_prorations
// preview, pending invoice items, tax and customer credit. No proration line
// means nothing was prorated (same price, or no time left): 0.
//
// That needs every line, and the invoice embeds only the first page of them.
// A one-item subscription yields at most three, so has_more means unrelated
// pending items crowd the page. Then:
//   - always_invoice: the previewed invoice is the immediate proration
//     invoice, so its subtotal is the proration (plus any pending items, which
//     that invoice would charge as well);
//   - create_prorations: there is no trustworthy figure, and a confirmation
//     is bound to the figures its summary states, so refuse to quote rather
//     than quote a wrong credit. The error wraps no billing sentinel: it is
//     neither Stripe's refusal nor an outage.
func prorationCents(inv *stripe.Invoice, chargeNow bool) (int64, error) {
	if inv.Lines != nil && !inv.Lines.HasMore {
		var sum int64
		for _, line := range inv.Lines.Data {
			if line.Proration {
				sum += line.Amount
			}
		}
		return sum, nil
	}
	if chargeNow {
		return inv.Subtotal, nil
	}
	return 0, fmt.Errorf("stripe preview invoice: %w", errLinesIncomplete)
}

// checkIdempotencyKey refuses keys Stripe cannot use, before anything is
// sent: stripe-go would send an empty key as is, and fail a long one with an
// error that would look like an outage (and so be retried forever).
func checkIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty idempotency key")
	case len(key) > 255:
		return fmt.Errorf("idempotency key is %d bytes; Stripe accepts at most 255", len(key))
	}
	return nil
}

// firstItemQuantity is the quantity of the subscription's first item, 0
// when the answer has none.
func firstItemQuantity(sub *stripe.Subscription) int64 {
	if sub.Items == nil || len(sub.Items.Data) == 0 || sub.Items.Data[0] == nil {
		return 0
	}
	return sub.Items.Data[0].Quantity
}

func firstItemID(sub *stripe.Subscription) (string, bool) {
	if sub.Items == nil || len(sub.Items.Data) == 0 || sub.Items.Data[0].ID == "" {
		return "", false
	}
	return sub.Items.Data[0].ID, true
}

// unixParam encodes t for Stripe; a zero t is left out, so Stripe uses the
// time it receives the request.
func unixParam(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	return stripe.Int64(t.Unix())
}

func unixTime(sec int64) time.Time {
	if sec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// seats is the quantity a plan change keeps: the subscription's, one when
// the change does not say.
func seats(change billing.PlanChange) int64 { return max(change.Quantity, 1) }

// seatsFrom is the item's quantity before the change.
func seatsFrom(change billing.PlanChange) int64 {
	if change.FromQuantity > 0 {
		return change.FromQuantity
	}
	return seats(change)
}

// phaseQuantity is the quantity of a phase's one item; 1 when the phase is
// unknown or has none (a schedule billingd made before it counted seats).
func phaseQuantity(ph *stripe.SubscriptionSchedulePhase) int64 {
	if ph == nil || len(ph.Items) == 0 || ph.Items[0].Quantity < 1 {
		return 1
	}
	return ph.Items[0].Quantity
}

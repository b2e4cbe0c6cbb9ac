package stripepaytest

import (
	"cmp"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// period is the length of every billing period in the fake. Real monthly
// periods run 28 to 31 days; a fixed 30 keeps proration arithmetic easy to
// check by hand.
const period = 30 * 24 * time.Hour

// createCustomer: POST /v1/customers (name, email, metadata).
func (s *Server) createCustomer(r *http.Request) (any, error) {
	f := r.PostForm
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &customer{
		id:       s.newID("cus"),
		name:     f.Get("name"),
		email:    f.Get("email"),
		created:  s.now().Truncate(time.Second),
		metadata: hashParams(f, "metadata"),
	}
	s.customers[c.id] = c
	return toCustomerJSON(c), nil
}

// createSubscription: POST /v1/subscriptions (customer, items[i][price],
// items[i][quantity], metadata). The subscription is active at once: the
// fake takes no payments.
func (s *Server) createSubscription(r *http.Request) (any, error) {
	f := r.PostForm
	customerID := f.Get("customer")
	if customerID == "" {
		return nil, errParamMissing("customer")
	}
	params, err := parseItems(f, "items")
	if err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, errParamMissing("items")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.customers[customerID]; !ok {
		return nil, errNoSuch(http.StatusBadRequest, "customer", "customer", customerID)
	}
	items, err := s.newItems(params)
	if err != nil {
		return nil, err
	}
	now := s.now().Truncate(time.Second)
	sub := &Subscription{
		ID:                 s.newID("sub"),
		Customer:           customerID,
		Status:             "active",
		Created:            now,
		CurrentPeriodStart: now,
		CurrentPeriodEnd:   now.Add(period),
		Items:              items,
		Metadata:           hashParams(f, "metadata"),
	}
	s.subs[sub.ID] = sub
	s.emit("customer.subscription.created", sub)
	return s.toSubscriptionJSON(sub, r), nil
}

// newItems makes the items of a new subscription; callers hold s.mu.
func (s *Server) newItems(params []itemParam) ([]Item, error) {
	items := make([]Item, len(params))
	var currency string
	for i, p := range params {
		if p.price == "" {
			return nil, errParamMissing("items[" + strconv.Itoa(i) + "][price]")
		}
		pr, ok := s.prices[p.price]
		if !ok {
			return nil, errNoSuch(http.StatusBadRequest, "items["+strconv.Itoa(i)+"][price]", "price", p.price)
		}
		if i > 0 && pr.currency != currency {
			return nil, errParamInvalid("items", "All prices on a subscription must have the same currency.")
		}
		currency = pr.currency
		items[i] = Item{ID: s.newID("si"), PriceID: pr.id, Quantity: quantityOr1(p)}
	}
	return items, nil
}

// updateSubscription: POST /v1/subscriptions/{id}. The fake supports what
// billingd does with it: changing the price or the quantity of existing
// items (items[i][id], items[i][price] and/or items[i][quantity]), with
// proration_behavior, proration_date, payment_behavior and metadata;
// cancelling at the period's end or resuming (cancel_at_period_end,
// cancellation_details: cancel.go). always_invoice invoices the proration
// of the items' changes at once (invoiceChange), as the subscription's
// latest_invoice; the payment parameters are validated but otherwise have
// no effect: the fake takes no payments (a DeclineCard fault refuses the
// update as Stripe refuses one with payment_behavior=error_if_incomplete).
func (s *Server) updateSubscription(r *http.Request) (any, error) {
	f := r.PostForm
	p, err := parseUpdate(f)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sub, ok := s.subs[id]
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "id", "subscription", id)
	}
	if err := checkUpdateAllowed(sub, f, p.cancel); err != nil {
		return nil, err
	}
	if p.hasProrationDate {
		if err := checkProrationDate(sub, "proration_date", p.prorationDate); err != nil {
			return nil, err
		}
	}
	changes, err := s.itemChanges(sub, p.items, "items")
	if err != nil {
		return nil, err
	}
	now := s.now().Truncate(time.Second)
	if p.behavior == "create_prorations" && len(p.items) > 0 {
		at := now
		if p.hasProrationDate {
			at = p.prorationDate
		}
		sub.PendingProrations += s.netProration(sub, changes, at)
	}
	if p.behavior == "always_invoice" && len(p.items) > 0 {
		at := now
		if p.hasProrationDate {
			at = p.prorationDate
		}
		s.invoiceChange(sub, changes, at)
		inv := s.invoices[sub.LatestInvoice]
		inv.SubscriptionDetails = &subscriptionDetailsJSON{Metadata: orEmpty(withMetadata(sub.Metadata, p.metadata))}
		s.invoices[inv.ID] = inv
	}
	for _, c := range changes {
		sub.Items[c.index].PriceID, sub.Items[c.index].Quantity = c.price.id, c.quantity
	}
	sub.applyCancelUpdate(p.cancel, now)
	mergeMetadata(&sub.Metadata, p.metadata)
	s.updates[sub.ID]++
	s.emit("customer.subscription.updated", sub)
	return s.toSubscriptionJSON(sub, r), nil
}

// updateParams is an update as sent.
type updateParams struct {
	items            []itemParam
	behavior         string
	prorationDate    time.Time
	hasProrationDate bool
	cancel           cancelUpdate
	metadata         map[string]string
}

// parseUpdate reads and checks the parameters of an update.
func parseUpdate(f url.Values) (updateParams, error) {
	var p updateParams
	var err error
	if p.items, err = parseItems(f, "items"); err != nil {
		return p, err
	}
	if p.behavior, err = enumParam(f, "proration_behavior", "create_prorations",
		"create_prorations", "always_invoice", "none"); err != nil {
		return p, err
	}
	if _, err := enumParam(f, "payment_behavior", "allow_incomplete",
		"allow_incomplete", "error_if_incomplete", "pending_if_incomplete", "default_incomplete"); err != nil {
		return p, err
	}
	date, hasDate, err := intParam(f, "proration_date")
	if err != nil {
		return p, err
	}
	p.prorationDate, p.hasProrationDate = time.Unix(date, 0), hasDate
	if p.cancel, err = parseCancelUpdate(f); err != nil {
		return p, err
	}
	p.metadata = hashParams(f, "metadata")
	return p, nil
}

// withMetadata is m after update, leaving m as it is.
func withMetadata(m, update map[string]string) map[string]string {
	out := maps.Clone(m)
	mergeMetadata(&out, update)
	return out
}

// getSubscription: GET /v1/subscriptions/{id}.
func (s *Server) getSubscription(r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sub, ok := s.subs[id]
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "id", "subscription", id)
	}
	return s.toSubscriptionJSON(sub, r), nil
}

// listInvoices: GET /v1/invoices?subscription=…[&created[gte]=…][&limit=…],
// newest first as Stripe lists them, one page.
func (s *Server) listInvoices(r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	subID := r.Form.Get("subscription")
	since, _ := strconv.ParseInt(r.Form.Get("created[gte]"), 10, 64)
	limit, err := strconv.Atoi(r.Form.Get("limit"))
	if err != nil || limit <= 0 || limit > 100 {
		limit = 10
	}
	var out []invoiceJSON
	for _, inv := range s.invoices {
		if (subID == "" || inv.Subscription == subID) && inv.Created >= since {
			out = append(out, inv)
		}
	}
	slices.SortFunc(out, func(a, b invoiceJSON) int { // newest first
		if a.Created != b.Created {
			return cmp.Compare(b.Created, a.Created)
		}
		return compareIDs(b.ID, a.ID)
	})
	list := newList("/v1/invoices", out[:min(limit, len(out))])
	list.HasMore = len(out) > limit
	return list, nil
}

// createPreview: POST /v1/invoices/create_preview for a change to an
// existing subscription (subscription, subscription_details[items],
// [proration_behavior], [proration_date]; customer optional). See
// previewInvoice for the arithmetic.
func (s *Server) createPreview(r *http.Request) (any, error) {
	f := r.PostForm
	subID := f.Get("subscription")
	if subID == "" {
		return nil, errParamInvalid("subscription", "the Stripe fake previews changes to an existing subscription only")
	}
	params, err := parseItems(f, "subscription_details[items]")
	if err != nil {
		return nil, err
	}
	behavior, err := enumParam(f, "subscription_details[proration_behavior]", "create_prorations",
		"create_prorations", "always_invoice", "none")
	if err != nil {
		return nil, err
	}
	prorationDate, hasProrationDate, err := intParam(f, "subscription_details[proration_date]")
	if err != nil {
		return nil, err
	}
	cancelNow, _, err := boolParam(f, "subscription_details[cancel_now]", false)
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subID]
	if !ok {
		return nil, errNoSuch(http.StatusBadRequest, "subscription", "subscription", subID)
	}
	if c := f.Get("customer"); c != "" && c != sub.Customer {
		return nil, errParamInvalid("customer", "The subscription does not belong to customer %s.", c)
	}
	at := s.now().Truncate(time.Second)
	if hasProrationDate {
		at = time.Unix(prorationDate, 0)
	}
	if err := checkProrationDate(sub, "subscription_details[proration_date]", at); err != nil {
		return nil, err
	}
	if cancelNow {
		if len(params) > 0 {
			return nil, errParamInvalid("subscription_details[cancel_now]", "cancel_now cannot be combined with items")
		}
		return s.previewCancellation(sub, at, behavior), nil
	}
	changes, err := s.itemChanges(sub, params, "subscription_details[items]")
	if err != nil {
		return nil, err
	}
	inv := s.previewInvoice(sub, changes, behavior, at)
	inv.BillingReason = "upcoming" // Stripe's billing_reason of simulated invoices
	return inv, nil
}

// itemChange is a new price and quantity for one existing item.
type itemChange struct {
	index    int // in sub.Items
	price    price
	quantity int64
}

// itemChanges checks the requested item changes against sub; callers hold
// s.mu. An item given without a price keeps its price and changes its
// quantity (if one is given). As with Stripe, a new price resets the
// quantity to 1 unless one is given (stripe-python issue #388, Stripe's
// answer): a price change that keeps the seats must send the quantity.
func (s *Server) itemChanges(sub *Subscription, params []itemParam, prefix string) ([]itemChange, error) {
	changes := make([]itemChange, len(params))
	for i, p := range params {
		param := func(name string) string { return prefix + "[" + strconv.Itoa(i) + "][" + name + "]" }
		if p.id == "" {
			return nil, errParamInvalid(param("id"), "the Stripe fake supports only changes to existing items; %s is required", param("id"))
		}
		index := sub.itemIndex(p.id)
		if index < 0 {
			return nil, errParamInvalid(param("id"), "The subscription item %s does not belong to %s.", p.id, sub.ID)
		}
		if p.price == "" {
			it := sub.Items[index]
			changes[i] = itemChange{index: index, price: s.prices[it.PriceID], quantity: it.Quantity}
			if p.hasQuantity {
				changes[i].quantity = p.quantity
			}
			continue
		}
		pr, ok := s.prices[p.price]
		if !ok {
			return nil, errNoSuch(http.StatusBadRequest, param("price"), "price", p.price)
		}
		if pr.currency != s.currency(sub) {
			return nil, errParamInvalid(param("price"), "The price's currency does not match the subscription's.")
		}
		changes[i] = itemChange{index: index, price: pr, quantity: quantityOr1(p)}
	}
	return changes, nil
}

func (sub *Subscription) itemIndex(itemID string) int {
	for i, it := range sub.Items {
		if it.ID == itemID {
			return i
		}
	}
	return -1
}

// checkProrationDate: Stripe prorates only within the current period.
func checkProrationDate(sub *Subscription, param string, at time.Time) error {
	if at.Before(sub.CurrentPeriodStart) || at.After(sub.CurrentPeriodEnd) {
		return errParamInvalid(param, "The proration date must be within the subscription's current period.")
	}
	return nil
}

func quantityOr1(p itemParam) int64 {
	if p.hasQuantity {
		return p.quantity
	}
	return 1
}

// mergeMetadata applies Stripe's metadata update rules: keys are set, and
// an empty value removes the key.
func mergeMetadata(dst *map[string]string, update map[string]string) {
	if len(update) == 0 {
		return
	}
	if *dst == nil {
		*dst = map[string]string{}
	}
	for k, v := range update {
		if v == "" {
			delete(*dst, k)
		} else {
			(*dst)[k] = v
		}
	}
}

package billing

import (
	"context"
	"errors"
	"regexp"
)

var orgIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CreateOrg creates the org's customer and subscription at the provider and
// stores them. The provider requests carry an idempotency key derived from
// the org id, so running it again after a failure does not create twice.
func (s *Service) CreateOrg(ctx context.Context, id, name, email, planID string) (Account, error) {
	display := DisplayName(name)
	switch {
	case !orgIDPattern.MatchString(id):
		return Account{}, Errorf(CodeInvalidRequest, "org id must be lower-case letters, digits, '-' or '_' (max 63)")
	case display == "" || display != name:
		return Account{}, Errorf(CodeInvalidRequest, "org name must be printable text without control or invisible characters (max %d characters)", maxDisplayNameRunes)
	}
	plan, ok := s.catalog.Plan(planID)
	if !ok {
		return Account{}, Errorf(CodeUnknownPlan, "no such plan")
	}
	if _, _, err := s.store.Account(ctx, id); err == nil {
		return Account{}, Errorf(CodeInvalidRequest, "org already exists")
	} else if !errors.Is(err, ErrNotFound) {
		return Account{}, storeError("read account", err)
	}
	created, err := s.payments.CreateCustomer(ctx, NewCustomer{OrgID: id, Name: name, Email: email, PriceID: plan.StripePriceID}, "billingd-org-"+id)
	if err != nil {
		return Account{}, providerError("create customer", err)
	}
	acct := Account{
		Org: Org{ID: id, Name: name, StripeCustomerID: created.CustomerID},
		Subscription: Subscription{Org: id, StripeSubscriptionID: created.SubscriptionID, StripeItemID: created.ItemID,
			Plan: plan.ID, Status: created.Status, CurrentPeriodEnd: created.CurrentPeriodEnd},
	}
	if err := s.store.CreateAccount(ctx, acct); err != nil {
		return Account{}, storeError("store account", err)
	}
	return acct, nil
}

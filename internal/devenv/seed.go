package devenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/billingd/billingd/billing"
)

// The demo org billingd dev seeds, and who its printed tokens speak for.
const (
	DemoOrg     = "demo"
	DemoOrgName = "Demo Org"
	DemoPlan    = "pro"
	DemoEmail   = "billing@demo.example"
	// AgentClient is the azp of the agent token: an agent, as every client
	// not in PERSON_CLIENTS is (contract §4).
	AgentClient  = "demo-agent"
	AgentSubject = "demo-user" // the person the agent acts for
	AdminSubject = "demo-admin"
	// DashboardClient is the azp of the admin token: it plays the
	// operator's own dashboard, a person-facing client that billingd dev
	// names in PERSON_CLIENTS, as an operator names theirs.
	DashboardClient = "demo-dashboard"
	// DevClientID is billingd dev's OIDC client for the pages' sign-in.
	DevClientID = "billingd-dev-pages"
)

// accounts reads an org's account; *postgres.Store is one.
type accounts interface {
	Account(ctx context.Context, org string) (billing.Account, time.Time, error)
}

// orgCreator creates an org at Stripe and in the store; *billing.Service is
// one.
type orgCreator interface {
	CreateOrg(ctx context.Context, id, name, email, planID string) (billing.Account, error)
}

// SeedDemoOrg creates the demo org on the pro plan unless it exists, so a
// restart keeps whatever plan the last session left it on. The plan catalog
// needs no seeding: it is configuration (the default catalog or PLANS_FILE),
// and the Stripe stand-ins are given, or accept, its price ids.
//
// On the Stripe fake, the demo subscription starts demoSubscriptionAge ago,
// so that the first upgrade shows a prorated amount.
func (e *Env) SeedDemoOrg(ctx context.Context, store accounts, svc orgCreator) (billing.Account, error) {
	acct, _, err := store.Account(ctx, DemoOrg)
	if err == nil {
		if e.fake != nil && !e.fake.knows(acct.Subscription.StripeSubscriptionID) {
			return billing.Account{}, fmt.Errorf("the demo org in %s was created with another Stripe, whose subscription %s the Stripe fake does not know: "+
				"run billingd dev --stripe=mock, or use a fresh database", e.Database, acct.Subscription.StripeSubscriptionID)
		}
		return acct, nil
	}
	if !errors.Is(err, billing.ErrNotFound) {
		return billing.Account{}, fmt.Errorf("look up the demo org: %w", err)
	}
	create := func() (err error) {
		acct, err = svc.CreateOrg(ctx, DemoOrg, DemoOrgName, DemoEmail, DemoPlan)
		return err
	}
	if e.fake != nil {
		err = e.fake.backdated(demoSubscriptionAge, create)
	} else {
		err = create()
	}
	if err != nil {
		// The whole cause, Stripe's text included: this reaches the operator's
		// terminal, not a client. With STRIPE_SECRET_KEY the usual one is a
		// price id of the catalog missing from that Stripe account.
		return billing.Account{}, fmt.Errorf("create the demo org %q on plan %s (with STRIPE_SECRET_KEY, PLANS_FILE must map the plans to prices of that account): %w", DemoOrg, DemoPlan, err)
	}
	return acct, nil
}

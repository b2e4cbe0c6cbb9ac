package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/postgres"
)

func migrateCmd(ctx context.Context, e env, args []string) error {
	fs := flags(e, "migrate", "migrate up | down N | version")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(e, "DATABASE_URL")
	if err != nil {
		return err
	}
	m, err := postgres.NewMigrator(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	switch rest := fs.Args(); {
	case len(rest) == 1 && rest[0] == "up":
		return m.Up()
	case len(rest) == 2 && rest[0] == "down":
		n, err := strconv.Atoi(rest[1])
		if err != nil || n < 1 {
			return fmt.Errorf("%w: migrate down takes a positive number of migrations", errUsage)
		}
		return m.Down(n)
	case len(rest) == 1 && rest[0] == "version":
		v, dirty, err := m.Version()
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, map[string]any{"version": v, "dirty": dirty})
	default:
		fs.Usage()
		return fmt.Errorf("%w: migrate up | down N | version", errUsage)
	}
}

func orgCmd(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf("%w: org create --id ID --name NAME --plan PLAN [--email E]", errUsage)
	}
	fs := flags(e, "org create", "org create --id ID --name NAME --plan PLAN [--email E]")
	id := fs.String("id", "", "org id (lower-case letters, digits, - and _)")
	name := fs.String("name", "", "org display name")
	plan := fs.String("plan", "", "initial plan id")
	email := fs.String("email", "", "billing e-mail (optional)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *id == "" || *name == "" || *plan == "" {
		fs.Usage()
		return fmt.Errorf("%w: --id, --name and --plan are required", errUsage)
	}
	cfg, err := loadConfig(e, "DATABASE_URL", "STRIPE_SECRET_KEY")
	if err != nil {
		return err
	}
	pool, err := app.OpenDatabase(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc, err := app.NewService(cfg, postgres.NewStore(pool), nil, app.NewLogger(cfg, e.stderr))
	if err != nil {
		return err
	}
	acct, err := svc.CreateOrg(ctx, *id, *name, *email, *plan)
	if err != nil {
		return fmt.Errorf("org create: %s", billing.PublicMessage(err))
	}
	sub := acct.Subscription
	return writeJSON(e.stdout, map[string]any{
		"id": acct.Org.ID, "name": acct.Org.Name, "stripe_customer_id": acct.Org.StripeCustomerID,
		"subscription": map[string]any{"stripe_subscription_id": sub.StripeSubscriptionID, "plan": sub.Plan,
			"status": sub.Status, "current_period_end": sub.CurrentPeriodEnd.UTC()},
	})
}

func plansCmd(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("%w: plans list", errUsage)
	}
	fs := flags(e, "plans list", "plans list")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	catalog, err := billing.NewCatalog(cfg.Plans)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, map[string]any{"plans": catalog.Plans()})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

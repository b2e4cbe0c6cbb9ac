//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/devenv"
)

// devDir holds dev mode's logs and, unless it runs as root, its PostgreSQL
// cluster and Stripe fake state, in the working tree (gitignored) so that
// each checkout has its own. (As root, devenv keeps the cluster where the
// postgres user can reach it, still one per checkout.)
const devDir = ".dev"

// devCmd runs billingd dev: it brings up what the configuration lacks
// (internal/devenv), then the same server as serve, and stops it all on
// SIGINT/SIGTERM. --stripe (or BILLINGD_DEV_STRIPE) picks the Stripe
// stand-in: the stateful fake by default, or stripe-mock.
func devCmd(ctx context.Context, e env, args []string) (err error) {
	fs := flags(e, "dev", "dev [--stripe=fake|mock]   (development only: PostgreSQL, a Stripe stand-in and a token issuer on this machine)")
	stripe := fs.String("stripe", e.getenv("BILLINGD_DEV_STRIPE"),
		"the Stripe stand-in when STRIPE_SECRET_KEY is unset: fake (default; stateful, real dates and proration) or mock (stripe-mock); env BILLINGD_DEV_STRIPE")
	if err := parse(fs, args); err != nil {
		return err
	}
	standIn, err := devenv.ParseStripeStandIn(*stripe)
	if err != nil {
		return fmt.Errorf("%w: --stripe: %v", errUsage, err)
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	if e.getenv("LOG_FORMAT") == "" {
		cfg.LogFormat = "text" // a person reads these logs
	}
	// Listen first: a busy port or a non-loopback address fails before
	// anything is started.
	ln, err := devenv.Listen(cfg.ListenAddr)
	if err != nil {
		return err
	}
	defer ln.Close()
	d, err := devenv.Start(ctx, cfg, devenv.Options{Dir: devDir, Stripe: standIn, Progress: e.stderr})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Stop()) }()
	a, err := app.New(ctx, d.Config, app.Options{LogOutput: e.stderr})
	if err != nil {
		return err
	}
	defer a.Close()
	acct, err := d.SeedDemoOrg(ctx, a.Store, a.Service)
	if err != nil {
		return err
	}
	if err := d.PrintWelcome(e.stdout, acct); err != nil {
		return err
	}
	go a.RunPurge(ctx)
	go a.RunSettle(ctx)
	go a.RunWebhooks(ctx)
	// A busy metrics port must not keep a newcomer from the demo.
	metricsLn, err := listenMetrics(a.Config.MetricsAddr)
	if err != nil {
		a.Log.Warn("metrics not served", "err", err)
	}
	logListening(a, ln, metricsLn)
	return serveUntilDone(ctx, a, ln, metricsLn)
}

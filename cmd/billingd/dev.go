//go:build unix

package main

import (
	"context"
	"errors"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/devenv"
)

// devDir holds dev mode's PostgreSQL cluster and logs, in the working tree
// (gitignored) so that each checkout has its own.
const devDir = ".dev"

// devCmd runs billingd dev: it brings up what the configuration lacks
// (internal/devenv), then the same server as serve, and stops it all on
// SIGINT/SIGTERM.
func devCmd(ctx context.Context, e env, args []string) (err error) {
	fs := flags(e, "dev", "dev   (development only: PostgreSQL, stripe-mock and a token issuer on this machine)")
	if err := parse(fs, args); err != nil {
		return err
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
	d, err := devenv.Start(ctx, cfg, devenv.Options{Dir: devDir, Progress: e.stderr})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Stop()) }()
	a, err := app.New(ctx, d.Config, app.Options{LogOutput: e.stderr})
	if err != nil {
		return err
	}
	defer a.Close()
	acct, err := devenv.SeedDemoOrg(ctx, a.Store, a.Service)
	if err != nil {
		return err
	}
	if err := d.PrintWelcome(e.stdout, acct); err != nil {
		return err
	}
	go a.RunPurge(ctx)
	go a.RunSettle(ctx)
	return serveUntilDone(ctx, httpServer(a), ln)
}

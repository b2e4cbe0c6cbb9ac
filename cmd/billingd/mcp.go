package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/mcp"
)

// mcpCmd serves the MCP tools over stdin/stdout for a local agent. The caller
// is BILLINGD_ACCESS_TOKEN, verified like a bearer token before anything is
// served; stdout carries only the protocol, logs go to stderr.
func mcpCmd(ctx context.Context, e env, args []string) error {
	fs := flags(e, "mcp stdio", "mcp stdio   (the caller is the access token in BILLINGD_ACCESS_TOKEN)")
	stdio := len(args) > 0 && args[0] == "stdio"
	if stdio {
		args = args[1:]
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if !stdio || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: mcp stdio", errUsage)
	}
	token := e.getenv("BILLINGD_ACCESS_TOKEN")
	if token == "" {
		// Checked before connecting anywhere; ServeStdio verifies the value.
		return errors.New("BILLINGD_ACCESS_TOKEN is required: an access token for this server")
	}
	cfg, err := loadConfig(e, "DATABASE_URL", "STRIPE_SECRET_KEY", "OAUTH_ISSUER")
	if err != nil {
		return err
	}
	// The schema belongs to serve and migrate: an agent's tool process, of
	// which a machine may run many, never migrates it.
	cfg.MigrateOnStart = false
	a, err := app.New(ctx, cfg, app.Options{LogOutput: e.stderr})
	if err != nil {
		return err
	}
	defer a.Close()
	return mcp.ServeStdio(ctx, a.MCPConfig(), token, e.stdin, e.stdout)
}

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/billingd/billingd/internal/mcpbridge"
)

// mcpCmd is MCP over stdin/stdout for a local agent: a bridge to a running
// billingd's /mcp (internal/mcpbridge). It reads BILLINGD_URL and
// BILLINGD_ACCESS_TOKEN and nothing else, so an agent's MCP configuration
// holds no database URL and no Stripe key (contract §2). stdout carries only
// the protocol; logs go to stderr.
func mcpCmd(ctx context.Context, e env, args []string) error {
	fs := flags(e, "mcp stdio", "mcp stdio\n\n"+
		"MCP over stdio for a local agent, relayed to a running billingd's /mcp with the agent's\n"+
		"access token. It needs only these two variables and reads no other:\n"+
		"  BILLINGD_URL           the server's PUBLIC_BASE_URL (https, or http to a loopback host)\n"+
		"  BILLINGD_ACCESS_TOKEN  the agent's bearer token\n")
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
	u, err := mcpbridge.ParseURL(e.getenv("BILLINGD_URL"))
	if err != nil {
		return err
	}
	return mcpbridge.Run(ctx, mcpbridge.Config{
		URL:    u,
		Token:  e.getenv("BILLINGD_ACCESS_TOKEN"),
		In:     e.stdin,
		Out:    e.stdout,
		Logger: slog.New(slog.NewTextHandler(e.stderr, nil)),
	})
}

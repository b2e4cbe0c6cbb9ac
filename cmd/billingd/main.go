// Command billingd gates plan changes behind a two-call confirmation
// handshake, over REST and MCP. main only wires: run parses the command line
// and hands over to one function per command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/billingd/billingd/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "billingd:", err)
		}
		stop()
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

var errUsage = errors.New("usage")

// env is what a command gets from the outside world.
type env struct {
	getenv func(string) string
	stdin  io.Reader // the MCP client's messages under mcp stdio
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name, summary string
	run           func(ctx context.Context, e env, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the HTTP server (REST, MCP at /mcp, health)", serve},
		{"migrate", "schema migrations: up | down N | version", migrateCmd},
		{"org", "org create --id ID --name NAME --plan PLAN [--email E]", orgCmd},
		{"plans", "plans list: print the plan catalog as JSON", plansCmd},
		{"mcp", "mcp stdio: MCP over stdio for local agents", mcpCmd},
		{"dev", "run everything on one machine with no configuration", devCmd},
		{"audit", "audit verify [--jwks URL|FILE] FILE|-: check an audit export's chain and receipts", auditCmd},
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: a command is required", errUsage)
		}
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	usage(stderr)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: billingd <command> [arguments]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nconfiguration comes from the environment; see docs/operations.md")
}

// flags returns a flag set that prints its usage to e.stderr and reports
// errors instead of exiting.
func flags(e env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: billingd %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// loadConfig reads the environment and checks the variables a command needs.
func loadConfig(e env, required ...string) (config.Config, error) {
	cfg, err := config.Load(e.getenv)
	if err != nil {
		return config.Config{}, err
	}
	return cfg, cfg.Require(required...)
}

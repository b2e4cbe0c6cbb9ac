package mcp

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// Verifier checks bearer access tokens (internal/auth.Verifier).
type Verifier interface {
	Verify(ctx context.Context, raw string) (auth.Identity, error)
}

// Config wires the MCP server.
type Config struct {
	Service  *billing.Service
	Verifier Verifier
	// PublicBaseURL is the server's canonical external URL: the MCP resource
	// is PublicBaseURL+"/mcp" and its metadata is served under
	// /.well-known/oauth-protected-resource/mcp.
	PublicBaseURL string
	// Logger receives one line per tool call and the causes of internal
	// errors.
	Logger *slog.Logger
	// RequestStateKey seals the request state of elicitations on protocol
	// 2026-07-28 (MCP_REQUEST_STATE_KEY, at least MinRequestStateKeyBytes).
	// The client may send the next round to any replica, so every replica
	// needs the same key. Empty: a random key for this process, and a next
	// round that reaches another process is refused (nothing executes).
	RequestStateKey []byte
	// Observer, when set, is told about every handshake call the plan tools
	// make, so that MCP calls are counted with the REST API's.
	Observer HandshakeObserver
	// ReplicaID (MCP_REPLICA_ID), when set, starts every session id this
	// process issues ("<id>.<random>"), so that a reverse proxy in front of
	// several replicas sends each 2025-11-25 session to the process that
	// holds it (docs/deployment-replicas.md, replicas.go).
	ReplicaID string
	// Clock, when set, replaces time.Now where the MCP layer itself reads
	// the time: the window of a request state. Tests set it to play a
	// request that arrives minutes later. Confirmations are timed by the
	// database's clock, never by this one.
	Clock func() time.Time
	// Middleware, when set, wraps every MCP request outside billingd's own
	// handling (internal/tracing's span per request).
	Middleware sdk.Middleware
}

// HandshakeObserver receives the outcome of each handshake call
// (internal/telemetry.Metrics).
type HandshakeObserver interface {
	ObserveHandshake(op billing.Operation, res billing.ChangeResult, err error)
}

func (c Config) clock() func() time.Time {
	if c.Clock == nil {
		return time.Now
	}
	return c.Clock
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// instructions tell the agent, once per session, how the tools fit together.
const instructions = `billingd changes this organisation's subscription: its plan, its seats, cancelling and resuming it. ` +
	`upgrade_plan, downgrade_plan, change_seats, cancel_subscription and resume_subscription take two calls: the first never changes anything and returns a summary and a confirm_token; ` +
	`show the summary to the user verbatim and make the second call, with the confirm_token, only after the user explicitly agrees. ` +
	`Use list_plans for plan ids and prices, get_subscription for the current plan, and cancel_confirmation when the user declines. ` +
	`Clients that support elicitation may see billingd ask the user directly instead; the tool results say what happened. ` +
	`Clients that render MCP Apps get billingd's own view of the proposal, with Confirm and Cancel, and no token: let the user decide there.`

// newServer returns an SDK server with billingd's tools.
func newServer(cfg Config, states stateSealer) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "billingd", Title: "billingd plan changes", Version: version()},
		&sdk.ServerOptions{
			Instructions: instructions,
			Logger:       cfg.logger(),
			// Tools and the one MCP Apps view (apps.go), a fixed list of
			// each: no logging capability (the SDK's default) and no
			// list-changed notifications to subscribe to.
			GetSessionID: sessionIDs(cfg.ReplicaID),
			Capabilities: appsCapable(&sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}, Resources: &sdk.ResourceCapabilities{}}),
		})
	t := tools{svc: cfg.Service, log: cfg.logger(), states: states, observer: cfg.Observer, now: cfg.clock()}
	registerTools(s, t)
	registerView(s, t)
	s.AddReceivingMiddleware(sdkErrorsAsContract(cfg.logger()))
	if cfg.Middleware != nil {
		s.AddReceivingMiddleware(cfg.Middleware) // added last: outermost
	}
	return s
}

// stateSealerFor is the sealer of cfg.RequestStateKey or, when none is
// configured, of a random key for this process. Over HTTP, replicas cannot
// open each other's states then, which the log says once, at the first
// state sealed (not at start: a single replica that never meets a
// 2026-07-28 elicitation has nothing to warn about).
func stateSealerFor(cfg Config) stateSealer {
	ephemeral := len(cfg.RequestStateKey) == 0
	states, err := newStateSealer(orRandom(cfg.RequestStateKey))
	if err != nil {
		panic("mcp: " + err.Error()) // config.Load refuses short keys
	}
	if ephemeral {
		states.onSeal = sync.OnceFunc(func() {
			cfg.logger().Warn("MCP_REQUEST_STATE_KEY is not set: this process seals elicitation request states " +
				"(protocol 2026-07-28) with its own key, so another replica refuses them; set the same key on every replica")
		})
	}
	return states
}

// toolFunc is the body of a tool: it gets the verified caller and the
// decoded arguments and returns the REST-shaped result with a line of text
// for the content block.
type toolFunc[In, Out any] func(ctx context.Context, caller billing.Caller, in In) (out Out, text string, err error)

// interactiveFunc is the body of a tool that may ask the user something
// through the client before it answers (elicitation), so it also gets the
// request: the client's capabilities, protocol version, session and, on a
// later round, the client's input responses and request state.
type interactiveFunc[In, Out any] func(ctx context.Context, req *sdk.CallToolRequest, caller billing.Caller, in In) (reply[Out], error)

// reply is what an interactive tool answers: a result (out and a line of
// text), or, on protocol 2026-07-28, input (input requests and a request
// state) that the client fulfils before calling the tool again.
type reply[Out any] struct {
	out   Out
	text  string
	meta  sdk.Meta // the result's _meta: what the MCP Apps view needs and the model must not see
	input *sdk.CallToolResult
}

func final[Out any](out Out, text string) reply[Out] { return reply[Out]{out: out, text: text} }

// addTool registers a tool whose arguments are In and whose successful
// result is Out.
func addTool[In, Out any](s *sdk.Server, t *sdk.Tool, log *slog.Logger, run toolFunc[In, Out]) {
	addInteractiveTool(s, t, log, func(ctx context.Context, _ *sdk.CallToolRequest, caller billing.Caller, in In) (reply[Out], error) {
		out, text, err := run(ctx, caller, in)
		return final(out, text), err
	})
}

// addInteractiveTool registers a tool that may ask for input first.
//
// The SDK's typed handler would put a zero Out into structuredContent even
// when the tool fails, and would check a failure's {"error":…} against Out's
// schema. So the SDK sees the result as any, and the declared output schema
// is built here from Out: success or the error envelope (outputSchema). A
// success is still marshalled and validated against it by the SDK; an
// input-required result carries no content, as the protocol demands.
func addInteractiveTool[In, Out any](s *sdk.Server, t *sdk.Tool, log *slog.Logger, run interactiveFunc[In, Out]) {
	scope, ok := toolScopes[t.Name]
	if !ok {
		panic("mcp: no scope for tool " + t.Name)
	}
	t.OutputSchema = outputSchema[Out]()
	sdk.AddTool(s, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		caller, err := callerOf(req, scope)
		if err != nil {
			return failure(ctx, log, t.Name, caller, err), nil, nil
		}
		r, err := run(ctx, req, caller, in)
		if err != nil {
			res := failure(ctx, log, t.Name, caller, err)
			res.Meta = failureMeta(err)
			return res, nil, nil
		}
		if r.input != nil {
			log.InfoContext(ctx, "tool call", callAttrs(t.Name, caller, "input_required")...)
			return r.input, nil, nil
		}
		log.InfoContext(ctx, "tool call", callAttrs(t.Name, caller, "ok")...)
		res := success(r.text, r.out)
		res.Meta = r.meta
		return res, r.out, nil
	})
}

// outputSchema is the tool's declared result: the REST body Out on success,
// or the contract's error envelope when isError is true. Strict clients (the
// npm SDK) validate structuredContent against it even for errors.
func outputSchema[Out any]() *jsonschema.Schema {
	ok := mustSchema[Out]()
	failed := mustSchema[errorEnvelope]()
	return &jsonschema.Schema{Type: "object", AnyOf: []*jsonschema.Schema{ok, failed}}
}

func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic("mcp: schema: " + err.Error())
	}
	return s
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

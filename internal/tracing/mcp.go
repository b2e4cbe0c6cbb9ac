package tracing

import (
	"context"
	"reflect"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MCP semantic conventions (OpenTelemetry GenAI conventions, "Semantic
// conventions for Model Context Protocol").
const (
	AttrMCPMethod    = attribute.Key("mcp.method.name")
	AttrToolName     = attribute.Key("gen_ai.tool.name")
	AttrGenAIOp      = attribute.Key("gen_ai.operation.name")
	AttrErrorType    = attribute.Key("error.type")
	methodToolsCall  = "tools/call"
	errorTypeTool    = "tool_error"
	errorTypeJSONRPC = "jsonrpc_error"
	operationExecute = "execute_tool"
)

// MCPMiddleware makes each MCP request a server span named
// "{mcp.method.name} {tool}", with mcp.method.name and, for tools/call,
// gen_ai.tool.name, under the HTTP server span of the request that carried
// it, and with the request's step spans under it. nil when off.
//
// The SDK runs a session's handlers on the session's context, not on the
// request's, so the parent is read from the request's traceparent header,
// which Handler set to the HTTP server span. A client that sends its own
// trace context in the request's params._meta (as the MCP conventions and
// SEP-414 say) gets the MCP span under that one instead, linked to the
// HTTP server span.
func (t *Tracing) MCPMiddleware() sdk.Middleware {
	if t == nil {
		return nil
	}
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if extra := req.GetExtra(); extra != nil && extra.Header != nil {
				ctx = t.propagator.Extract(ctx, propagation.HeaderCarrier(extra.Header))
			}
			var links []trace.Link
			if caller := t.propagator.Extract(context.Background(), metaCarrier(metaOf(req))); trace.SpanContextFromContext(caller).IsValid() {
				if http := trace.LinkFromContext(ctx); http.SpanContext.IsValid() {
					links = append(links, http)
				}
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(caller))
			}
			name, attrs := method, []attribute.KeyValue{AttrMCPMethod.String(method)}
			call, isCall := req.(*sdk.CallToolRequest)
			if isCall && call.Params != nil {
				name += " " + call.Params.Name
				attrs = append(attrs, AttrToolName.String(call.Params.Name), AttrGenAIOp.String(operationExecute))
			}
			ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...),
				trace.WithLinks(links...))
			defer span.End()
			ctx, endSteps := t.stepSpans(ctx)
			defer endSteps()
			res, err := next(ctx, method, req)
			switch r, _ := res.(*sdk.CallToolResult); {
			case err != nil:
				// A JSON-RPC error: its text may quote the request's
				// arguments (a token among them), so it is not recorded.
				span.SetStatus(codes.Error, "")
				span.SetAttributes(AttrErrorType.String(errorTypeJSONRPC))
			case r != nil && r.IsError:
				span.SetStatus(codes.Error, "")
				span.SetAttributes(AttrErrorType.String(errorTypeTool))
			}
			return res, err
		}
	}
}

// metaOf is the request's params._meta, or nil (the SDK hands requests
// without params as typed nil pointers).
func metaOf(req sdk.Request) map[string]any {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p.GetMeta()
}

// metaCarrier reads W3C trace context from params._meta, whose
// traceparent and tracestate keys SEP-414 reserves.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(string, string) {} // read only

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

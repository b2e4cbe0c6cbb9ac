package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves the tools over in and out (newline-delimited JSON-RPC)
// until the client disconnects or ctx ends. The caller is the one access
// token given: it is verified first, exactly like a bearer token, and an
// invalid one is an error before anything is served. out carries only the
// protocol; logs go to cfg.Logger.
func ServeStdio(ctx context.Context, cfg Config, accessToken string, in io.Reader, out io.Writer) error {
	id, err := cfg.Verifier.Verify(ctx, accessToken)
	if err != nil {
		return fmt.Errorf("BILLINGD_ACCESS_TOKEN: %w", err)
	}
	// One process: request states need no key shared with anyone.
	states, err := newStateSealer(orRandom(cfg.RequestStateKey))
	if err != nil {
		return err
	}
	server := newServer(cfg, states)
	server.AddReceivingMiddleware(withTokenInfo(tokenInfo(id)))
	cfg.logger().Info("billingd MCP over stdio", "org", id.Org, "principal", id.Subject, "client", id.Client,
		"token_expires_at", id.Expiry)
	err = server.Run(ctx, &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp stdio: %w", err)
	}
	return nil
}

// withTokenInfo attaches the stdio session's verified token to every tool
// call, the same place the HTTP transport puts the bearer token's, so tools
// have one way to learn their caller.
func withTokenInfo(info *sdkauth.TokenInfo) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if call, ok := req.(*sdk.CallToolRequest); ok {
				call.Extra = &sdk.RequestExtra{TokenInfo: info}
			}
			return next(ctx, method, req)
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

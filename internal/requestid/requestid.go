// Package requestid carries the id of the HTTP request being served in a
// context.Context, so that code far from the transport (the Stripe provider's
// decorator, for one) can put it in its logs.
package requestid

import "context"

type key struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// From returns the request id in ctx, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}

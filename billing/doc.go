// Package billing is the plan-change handshake: the one place where every rule
// about confirmation tokens lives.
//
// A plan change takes two calls. The first call (Propose) executes nothing: it
// asks the payment provider for a preview of the change, stores a single-use
// confirmation bound to the caller, the operation and every fact the summary
// states, and returns a pbc_ token with a human-readable summary. The caller
// (an agent or a dashboard) shows the summary to a human. Only a second call
// carrying the token (Confirm) executes the change, inside one database
// transaction that locks and consumes the confirmation, calls the provider
// with an idempotency key derived from the confirmation, stores the new
// subscription and writes the audit events.
//
// Transports (rest, mcp) decode requests into ChangeRequest, call Service and
// map *Error to their own representation; they hold no handshake rules.
// Storage and the payment provider are behind the small interfaces in
// store.go and provider.go, implemented in internal/postgres and
// internal/stripepay.
package billing

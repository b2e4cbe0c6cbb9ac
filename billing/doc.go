// Package billing is the plan-change handshake: the one place where every rule
// about confirmation tokens lives.
//
// A plan change takes two calls. The first call (Propose) executes nothing: it
// asks the payment provider for a preview of the change, stores a single-use
// confirmation bound to the caller, the operation and every fact the summary
// states, and returns a pbc_ token with a human-readable summary. The caller
// (an agent or a dashboard) shows the summary to a human. Only a second call
// carrying the token executes the change: it locks the subscription and the
// confirmation, checks every rule and the subscription at the provider,
// commits a recovery point (the confirmation executing, so that a crash
// forgets nothing), calls the provider with an idempotency key derived from
// the confirmation and, in the transaction that consumes the token, stores
// the new subscription, the receipt and the audit events. Provider events
// are hints: billingd records the subscription as the provider has it.
//
// Transports (rest, mcp) decode requests into ChangeRequest, call Service and
// map *Error to their own representation; they hold no handshake rules.
// Storage and the payment provider are behind the small interfaces in
// store.go and provider.go, implemented in internal/postgres and
// internal/stripepay (with test doubles in billingtest and
// internal/stripepay/stripepaytest).
//
// Where things are, by use case:
//
//	operation.go  the gated operations, as data; each in op_*.go
//	propose.go    the first call, step by step, each step in a file of its own:
//	              target.go, policy.go, quote.go, mandate.go, issue.go
//	target.go     what the request asks the subscription to become, if it can be quoted now
//	quote.go      the terms, priced by the provider, and the request they make
//	issue.go      the confirmation stored, with its summary and token
//	admission.go  the bulkhead in front of every step that holds locks while the provider
//	              answers (second calls, settling, webhooks), and their connections
//	confirm.go    the second call, step by step: consume (lock, check), checkAtProvider,
//	              the recovery point, send, recordAttempt; replay
//	redeem.go     the rules a second call must meet, and what it is told when it fails
//	settle.go     unknown provider outcomes: settled by retry, settler, webhook, only
//	              while the consent still holds
//	policy.go     the org's rules and how they are applied, before and at execution
//	verify.go     the verify level: proof that the person signed in afresh
//	approval.go   the approve level: another person's decision
//	person.go     who is a person: billingd's pages or PERSON_CLIENTS; all else is an agent
//	cancel.go     cancelling a pending confirmation
//	reconcile.go  provider events (webhooks): the provider's state, drift and settling
//	evidence.go   receipts of executed changes
//	org.go        creating an org with its customer and subscription
//	queries.go    reads: plans, subscription, pending confirmations, audit log
//	ratelimit.go  per-principal limits, counted from the audit log
//	consent.go    how the person agreed: the method each path may record
//	amounts.go    every part of the amount: Stripe's parts, checked and stated
//	schedule.go   downgrades at the period's end: scheduled changes, keeping the plan,
//	              the renewal that applies them
//	summary.go, money.go, token.go, plan.go  the summary text, amounts, tokens, catalog
package billing

// Package webhooks tells people outside billingd what happens in it
// (contract §10, "Outbound webhooks"): an org's admins register endpoints,
// and every audit event of a kind an endpoint asked for becomes a delivery
// to it.
//
// The deliveries are an outbox. The database writes them (a trigger on
// audit_events, migration 000018) in the transaction that writes the audit
// event, so a notification exists exactly when what it tells of was
// committed, and the handshake sends nothing more to the database for it.
// Every replica runs a Deliverer, which claims due deliveries under a lease
// (no two replicas send one delivery at once; a killed replica's claim ends
// with its lease), sends each outside any transaction with a bounded
// timeout, and records the answer: delivered, or retried with backoff for
// more than a day, then failed. Delivery is at least once; receivers
// de-duplicate by the webhook-id header.
//
// Bodies follow the Standard Webhooks specification (signed headers
// webhook-id, webhook-timestamp, webhook-signature) or, for an endpoint of
// format slack, Slack's incoming-webhook message. Endpoint URLs must be
// https and resolve to public addresses, checked when an endpoint is
// created and again at every connection (guard.go), unless
// WEBHOOK_ALLOW_PRIVATE_NETWORKS allows private ones.
package webhooks

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// The outbound event types (contract §10).
const (
	ApprovalRequested     = "approval.requested"
	ApprovalGranted       = "approval.granted"
	ApprovalRejected      = "approval.rejected"
	ApprovalExpired       = "approval.expired"
	VerificationRequested = "verification.requested"
	ChangeExecuted        = "change.executed"
	ChangeScheduled       = "change.scheduled"
	ChangeFailed          = "change.failed"
	MandateUsed           = "mandate.used"
)

// EventTypes are every type an endpoint may ask for.
var EventTypes = []string{ApprovalRequested, ApprovalGranted, ApprovalRejected, ApprovalExpired,
	VerificationRequested, ChangeExecuted, ChangeScheduled, ChangeFailed, MandateUsed}

// KnownEventType reports whether t is one of EventTypes.
func KnownEventType(t string) bool { return slices.Contains(EventTypes, t) }

// Body formats of an endpoint.
const (
	FormatStandard = "standard" // Standard Webhooks: the event as JSON, signed
	FormatSlack    = "slack"    // a Slack incoming-webhook message
)

// Endpoint is where an org wants to hear of its events.
type Endpoint struct {
	ID     string   `json:"id"`
	Org    string   `json:"-"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Format string   `json:"format"`
	// Secret is shown once, in the answer that creates or rotates it.
	Secret    string    `json:"secret,omitempty"`
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// PreviousSecretUntil: after a rotation, the previous secret still
	// signs until then.
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
	// Recent are the endpoint's latest deliveries, newest first (lists).
	Recent []DeliveryStatus `json:"recent_deliveries,omitempty"`
}

// DeliveryStatus is how one delivery went so far.
type DeliveryStatus struct {
	EventID       string     `json:"event_id"`
	Type          string     `json:"type"`
	CreatedAt     time.Time  `json:"created_at"`
	Status        string     `json:"status"` // pending, delivered, failed
	Attempts      int        `json:"attempts"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	LastStatus    int        `json:"last_status,omitempty"` // the receiver's HTTP status
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// Delivery is one claimed send of an event to an endpoint.
type Delivery struct {
	ID        int64
	Lease     string // the claim; only its holder records the outcome
	Attempt   int    // this attempt's number, from 1
	EventID   string
	Type      string
	Org       string
	CreatedAt time.Time
	Data      json.RawMessage
	URL       string
	Format    string
	// Secrets sign the body: the current one, and the previous one while
	// a rotation's overlap lasts.
	Secrets []string
}

// Outcome is what became of one attempt.
type Outcome struct {
	DeliveryID int64
	Lease      string
	// Status: delivered, pending (tried again after RetryAfter) or failed
	// (no more attempts).
	Status     string
	RetryAfter time.Duration
	HTTPStatus int
	Error      string
}

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusDelivered = "delivered"
	StatusFailed    = "failed"
)

// Store keeps endpoints and the outbox (internal/postgres implements it).
// Endpoint lookups of another org's endpoint, or none, are billing.ErrNotFound.
type Store interface {
	CreateEndpoint(ctx context.Context, e Endpoint) (Endpoint, error)
	// Endpoints lists the org's endpoints, with up to recent deliveries each.
	Endpoints(ctx context.Context, org string, recent int) ([]Endpoint, error)
	DeleteEndpoint(ctx context.Context, org, id string) error
	// RotateSecret makes secret the endpoint's, the current one signing
	// too for overlap.
	RotateSecret(ctx context.Context, org, id, secret string, overlap time.Duration) (Endpoint, error)
	// ClaimDeliveries claims up to limit due deliveries, at most one per
	// endpoint and none of an endpoint with a delivery in flight, each for
	// lease: it is due again when the lease ends unless its outcome is
	// recorded first.
	ClaimDeliveries(ctx context.Context, limit int, lease time.Duration) ([]Delivery, error)
	// RecordOutcome records an attempt's outcome if the claim is still the
	// delivery's.
	RecordOutcome(ctx context.Context, o Outcome) error
	// OldestPending is the age of the oldest pending delivery (0: none).
	OldestPending(ctx context.Context) (time.Duration, error)
	// PurgeDeliveries deletes finished deliveries older than age.
	PurgeDeliveries(ctx context.Context, age time.Duration) (int64, error)
}

package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// ReceiptClaims are what a receipt states about an executed change (contract
// §11). A receipt is signed by billingd, so anyone holding the published keys
// can check it without trusting billingd's database.
type ReceiptClaims struct {
	Issuer            string    `json:"iss"`
	Subject           string    `json:"sub"` // the requester
	IssuedAt          int64     `json:"iat"`
	Org               string    `json:"org"`
	Client            string    `json:"client"`
	ConfirmationID    string    `json:"confirmation_id"`
	Operation         Operation `json:"operation"`
	From              string    `json:"from"`
	To                string    `json:"to"`
	AmountDueNowCents int64     `json:"amount_due_now_cents"`
	Currency          string    `json:"currency"`
	ProrationDate     time.Time `json:"proration_date"`
	// SummarySHA256 is the hex SHA-256 of the exact summary text the person
	// was shown before agreeing.
	SummarySHA256        string     `json:"summary_sha256"`
	Approver             string     `json:"approver,omitempty"`
	VerifiedAt           *time.Time `json:"verified_at,omitempty"`
	StripeSubscriptionID string     `json:"stripe_subscription_id"`
	IdempotencyKey       string     `json:"idempotency_key"`
	Livemode             bool       `json:"livemode"`
	ExecutedAt           time.Time  `json:"executed_at"`
}

// SummaryHash is the summary_sha256 of a summary text.
func SummaryHash(summary string) string {
	sum := sha256.Sum256([]byte(summary))
	return hex.EncodeToString(sum[:])
}

// ReceiptSigner turns claims into a signed receipt (a compact JWS). It is
// declared here so that billing needs no JOSE library.
type ReceiptSigner interface {
	SignReceipt(ReceiptClaims) (string, error)
}

// ChainedEvent is an audit event with its place in the org's hash chain, as
// the export writes it: one JSON object per line, oldest first, with the
// receipt of an OPERATION_EXECUTED event inline.
type ChainedEvent struct {
	AuditEvent
	Seq      int64  `json:"seq"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	Receipt  string `json:"receipt,omitempty"`
}

// StoredReceipt is a receipt as the store keeps it.
type StoredReceipt struct {
	ConfirmationID string
	Org            string
	Principal      string
	Receipt        string
}

// EvidenceStore reads what a dispute needs. Receipts and audit events outlive
// the confirmations they describe.
type EvidenceStore interface {
	// ExportAudit calls fn with each of the org's events in chain order.
	ExportAudit(ctx context.Context, org string, fn func(ChainedEvent) error) error
	// Receipt reads the org's receipt of a confirmation; ErrNotFound if none.
	Receipt(ctx context.Context, org, confirmationID string) (StoredReceipt, error)
}

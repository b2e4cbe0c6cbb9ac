package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ReceiptClaims are what a receipt states about an executed change (contract
// §11). A receipt is signed by billingd, so anyone holding the published keys
// can check it without trusting billingd's database.
type ReceiptClaims struct {
	Issuer         string    `json:"iss"`
	Subject        string    `json:"sub"` // the requester
	IssuedAt       int64     `json:"iat"`
	Org            string    `json:"org"`
	Client         string    `json:"client"`
	ConfirmationID string    `json:"confirmation_id"`
	Operation      Operation `json:"operation"`
	From           string    `json:"from"`
	To             string    `json:"to"`
	// QuantityFrom and QuantityTo are the seats before and after the change
	// (a plan change keeps them).
	QuantityFrom int64 `json:"quantity_from"`
	QuantityTo   int64 `json:"quantity_to"`
	// CreditCents is the credit the summary stated: on the next invoice
	// (fewer seats or a cheaper plan now), or to the customer's balance
	// (cancelling now): credited, not refunded. CreditedCents is what the
	// change's own invoice credited to the balance (cancelling now, as
	// Stripe prorated it when made).
	CreditCents   int64 `json:"credit_cents,omitempty"`
	CreditedCents int64 `json:"credited_cents,omitempty"`
	// Cancellation is what the change did to the subscription's end (now,
	// period_end, resume), CancelAt when access ends.
	Cancellation Cancellation `json:"cancellation,omitempty"`
	CancelAt     *time.Time   `json:"cancel_at,omitempty"`
	// AmountDueNowCents is what the provider invoiced at once for the
	// change (an upgrade's own invoice; 0 for a change that invoiced
	// nothing at once), never only what was quoted. nil (absent) when
	// billingd could not identify the upgrade's own invoice
	// (AmountInvoicedUnknown).
	AmountDueNowCents *int64 `json:"amount_due_now_cents,omitempty"`
	// AmountInvoicedUnknown: the change was made, but billingd could not
	// identify the invoice the provider made for it (contract §6).
	AmountInvoicedUnknown bool `json:"amount_invoiced_unknown,omitempty"`
	// QuotedAmountDueNowCents is the amount the summary stated; it differs
	// from AmountDueNowCents only if the provider invoiced otherwise.
	QuotedAmountDueNowCents int64 `json:"quoted_amount_due_now_cents"`
	// InvoiceID is the provider's invoice of AmountDueNowCents.
	InvoiceID string `json:"invoice_id,omitempty"`
	Currency  string `json:"currency"`
	// CurrencyDigits say how the amounts are counted (contract §6), so a
	// receipt is read right without billingd's table.
	CurrencyDigits
	ProrationDate time.Time `json:"proration_date"`
	// SummarySHA256 is the hex SHA-256 of the exact summary text the person
	// was shown before agreeing.
	SummarySHA256        string     `json:"summary_sha256"`
	Approver             string     `json:"approver,omitempty"`
	VerifiedAt           *time.Time `json:"verified_at,omitempty"`
	StripeSubscriptionID string     `json:"stripe_subscription_id"`
	IdempotencyKey       string     `json:"idempotency_key"`
	Livemode             bool       `json:"livemode"`
	ExecutedAt           time.Time  `json:"executed_at"`
	// Quoted are the parts of the amount the summary stated (contract §6),
	// as the confirmation was bound to them.
	Quoted *QuotedAmounts `json:"quoted,omitempty"`
	// Consent is how the person agreed (contract §11).
	Consent *Consent `json:"consent,omitempty"`
	// At is "period_end" for a change scheduled for EffectiveAt, the end
	// of the period: the receipt is signed when it is scheduled, and the
	// provider makes it then.
	At          string     `json:"at,omitempty"`
	EffectiveAt *time.Time `json:"effective_at,omitempty"`
	// QuotedNextCharge is what the renewal at the new plan was quoted to
	// charge then (period_end): a quote, not an invoice; the renewal's own
	// invoice may differ (tax, discounts or credit changed by then).
	QuotedNextCharge *Amounts `json:"quoted_next_charge,omitempty"`
	// Cancels is the scheduled change this change cancelled.
	Cancels *ScheduledChangeView `json:"cancels,omitempty"`
}

// SummaryHash is the summary_sha256 of a summary text.
func SummaryHash(summary string) string {
	sum := sha256.Sum256([]byte(summary))
	return hex.EncodeToString(sum[:])
}

// ReceiptSigner turns claims into a signed receipt, and a checkpoint into a
// signed checkpoint (compact JWS, with the same keys). It is declared here
// so that billing needs no JOSE library.
type ReceiptSigner interface {
	SignReceipt(ReceiptClaims) (string, error)
	SignCheckpoint(Checkpoint) (string, error)
}

// Checkpoint is what a signed audit checkpoint states (contract §11): the
// org's chain had event Seq with hash Hash at IssuedAt. Whoever keeps one
// can show any later rewrite of the chain up to Seq, even one re-hashed
// and re-chained, since the new chain no longer ends in Hash at Seq.
type Checkpoint struct {
	Org      string `json:"org"`
	Seq      int64  `json:"seq"`
	Hash     string `json:"hash"`
	IssuedAt int64  `json:"iat"`
}

// ExportCheckpointLine is the last line of an audit export: the signed
// checkpoint of its last event.
type ExportCheckpointLine struct {
	Checkpoint string `json:"checkpoint"`
}

// GenesisHash is the prev_hash of an org's first event, and the hash of
// the checkpoint of an org without events.
var GenesisHash = strings.Repeat("0", 64)

// ChainedEvent is an audit event with its place in the org's hash chain, as
// the export writes it: one JSON object per line, oldest first, with the
// receipt of an OPERATION_EXECUTED event inline.
type ChainedEvent struct {
	AuditEvent
	Seq      int64  `json:"seq"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	Receipt  string `json:"receipt,omitempty"`
	// ReceiptSHA256 binds the receipt into the chain: the hex SHA-256 of
	// Receipt, hashed with the event (chain version 2). Empty for events
	// without a receipt and executed events recorded before it existed.
	ReceiptSHA256 string `json:"receipt_sha256,omitempty"`
}

// StoredReceipt is a receipt as the store keeps it.
type StoredReceipt struct {
	ConfirmationID string
	Org            string
	Principal      string
	Summary        string // the summary the person agreed to
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

// ReceiptView is a receipt as clients get it, with the summary the person
// agreed to: its SHA-256 is the receipt's summary_sha256.
type ReceiptView struct {
	ConfirmationID string `json:"confirmation_id"`
	Summary        string `json:"summary"`
	Receipt        string `json:"receipt"`
}

// ExportAudit calls fn with each event of the caller's org, oldest first,
// with its chain hashes and, for executed changes, the receipt, and then
// returns the signed checkpoint of the last event ("" when no signer is
// configured: unit tests). The caller must hold billing:admin (checked by
// the transport, like AuditLog). An error from fn stops the export and is
// returned as is.
func (s *Service) ExportAudit(ctx context.Context, caller Caller, fn func(ChainedEvent) error) (string, error) {
	if s.evidence == nil {
		return "", Errorf(CodeNotFound, "audit export is not available")
	}
	head := Checkpoint{Org: caller.Org, Hash: GenesisHash}
	var fnErr error
	err := s.evidence.ExportAudit(ctx, caller.Org, func(e ChainedEvent) error {
		head.Seq, head.Hash = e.Seq, e.Hash
		fnErr = fn(e)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return "", storeError("export audit log", err)
	}
	if err != nil || s.receipts == nil {
		return "", err
	}
	// Signed after the last event was read, of exactly what was exported:
	// the checkpoint states no more than the export shows.
	head.IssuedAt = time.Now().Unix()
	checkpoint, err := s.receipts.SignCheckpoint(head)
	if err != nil {
		return "", fmt.Errorf("sign audit checkpoint: %w", err)
	}
	return checkpoint, nil
}

// Receipt returns the receipt of one of the org's executed confirmations, to
// the person who asked for the change or to an admin of the org; anyone else
// is told it does not exist.
func (s *Service) Receipt(ctx context.Context, caller Caller, confirmationID string) (ReceiptView, error) {
	notFound := Errorf(CodeNotFound, "no receipt for this confirmation")
	if s.evidence == nil || confirmationID == "" {
		return ReceiptView{}, notFound
	}
	r, err := s.evidence.Receipt(ctx, caller.Org, confirmationID)
	if errors.Is(err, ErrNotFound) {
		return ReceiptView{}, notFound
	}
	if err != nil {
		return ReceiptView{}, storeError("read receipt", err)
	}
	if r.Principal != caller.Principal && !caller.Admin {
		return ReceiptView{}, notFound
	}
	return ReceiptView{ConfirmationID: r.ConfirmationID, Summary: r.Summary, Receipt: r.Receipt}, nil
}

// chargedFor is what the provider invoiced at once for c's change, as
// applied: an upgrade's own invoice. nil when the change invoiced nothing
// at once (a downgrade credits the next invoice, a keep or a change at the
// period's end charges nothing now). An upgrade whose own invoice billingd
// cannot identify (invoiceOf) is charged an amount unknown: never the
// quote, nor a later invoice's.
func chargedFor(c Confirmation, applied AppliedChange) *Charged {
	if !invoicesNow(c) {
		return nil
	}
	inv := applied.Invoice
	if inv == nil {
		return &Charged{QuotedAmountDueNowCents: c.Terms.AmountDueCents, Currency: c.Terms.Currency,
			CurrencyDigits: DigitsOf(c.Terms.Currency), AmountInvoicedUnknown: true}
	}
	amount := inv.AmountDueCents
	return &Charged{AmountDueNowCents: &amount, QuotedAmountDueNowCents: c.Terms.AmountDueCents,
		Currency: inv.Currency, CurrencyDigits: DigitsOf(inv.Currency), InvoiceID: inv.ID, CreditedCents: inv.CreditedCents}
}

// invoicesNow reports whether c's change makes an invoice at once: a
// charge (chargesNow), or a cancellation now's final invoice, which
// credits the unused time.
func invoicesNow(c Confirmation) bool {
	return chargesNow(c) || c.Terms.Cancellation == CancelNow
}

// chargedNotice says, for the person, that the provider invoiced another
// amount than the one quoted, or that billingd does not know what it
// invoiced; "" when the invoice says what was quoted.
func chargedNotice(ch *Charged) string {
	switch {
	case ch == nil:
		return ""
	case ch.AmountInvoicedUnknown:
		return "The change was made, but billingd could not identify the invoice the payment provider made for it: " +
			"the amount invoiced is unknown (" + formatMoney(ch.QuotedAmountDueNowCents, ch.Currency) +
			" was quoted). Tell the user to check the invoice."
	case *ch.AmountDueNowCents == ch.QuotedAmountDueNowCents:
		return ""
	}
	return "The payment provider invoiced " + formatMoney(*ch.AmountDueNowCents, ch.Currency) + " for this change, not the " +
		formatMoney(ch.QuotedAmountDueNowCents, ch.Currency) + " quoted (invoice " + ch.InvoiceID +
		"): tax, discounts or account credit changed between the quote and the change. Tell the user."
}

// receiptFor signs the receipt of confirmation c, executed at executedAt on
// subscription sub, for the transaction that records the execution; charged
// is what the provider invoiced for it at once (nil: nothing). No signer
// configured (unit tests): no receipt.
func (s *Service) receiptFor(c Confirmation, sub Subscription, executedAt time.Time, charged *Charged) (*StoredReceipt, error) {
	if s.receipts == nil {
		return nil, nil
	}
	// A change that invoices nothing at once is due what was quoted: 0
	// for a downgrade. An upgrade states its own invoice, or that its
	// amount is unknown.
	quoted := c.Terms.AmountDueCents
	invoiced, invoiceID, unknown, credited := &quoted, "", false, int64(0)
	if charged != nil {
		invoiced, invoiceID, unknown = charged.AmountDueNowCents, charged.InvoiceID, charged.AmountInvoicedUnknown
		credited = charged.CreditedCents
	}
	claims := ReceiptClaims{
		Issuer: s.publicBaseURL, Subject: c.Principal, IssuedAt: executedAt.Unix(), Org: c.Org, Client: c.Client,
		ConfirmationID: c.ID, Operation: c.Operation, From: c.Terms.FromPlan, To: c.Terms.ToPlan,
		QuantityFrom: c.Terms.seatsFrom(), QuantityTo: c.Terms.seatsTo(), CreditCents: c.Terms.CreditCents, CreditedCents: credited,
		AmountDueNowCents: invoiced, QuotedAmountDueNowCents: c.Terms.AmountDueCents, InvoiceID: invoiceID,
		AmountInvoicedUnknown: unknown,
		Currency:              c.Terms.Currency, CurrencyDigits: DigitsOf(c.Terms.Currency),
		ProrationDate: c.Terms.ProrationDate.UTC(), SummarySHA256: SummaryHash(c.Summary), Approver: c.Approver,
		StripeSubscriptionID: sub.StripeSubscriptionID, IdempotencyKey: idempotencyKey(c),
		Livemode: c.Terms.Livemode, ExecutedAt: executedAt.UTC(),
		Quoted: quotedAmounts(c.Terms), Consent: consentOf(c),
	}
	if v := c.Verification; v != nil && !v.VerifiedAt.IsZero() {
		at := v.VerifiedAt.UTC()
		claims.VerifiedAt = &at
	}
	if c.Terms.AtPeriodEnd {
		at := c.Terms.NextChargeAt.UTC()
		claims.At, claims.EffectiveAt, claims.QuotedNextCharge = AtPeriodEnd, &at, c.Terms.AtRenewal
	}
	claims.Cancels = scheduledView(c.Terms.Cancels)
	if d := detailsOf(c.Terms); d.Cancellation != "" {
		claims.Cancellation, claims.CancelAt = d.Cancellation, d.CancelAt
		if c.Terms.Cancellation == CancelNow && !sub.CanceledAt.IsZero() {
			at := sub.CanceledAt.UTC() // when Stripe ended it, not when it was quoted
			claims.CancelAt = &at
		}
	}
	jws, err := s.receipts.SignReceipt(claims)
	if err != nil {
		return nil, fmt.Errorf("sign receipt: %w", err)
	}
	return &StoredReceipt{ConfirmationID: c.ID, Org: c.Org, Principal: c.Principal, Summary: c.Summary, Receipt: jws}, nil
}

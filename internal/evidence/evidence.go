// Package evidence checks what billingd exports for disputes, offline: the
// per-org hash chain of the audit log (the same canonical encoding the
// database computes in migration 000006), the signed receipts inline in it,
// and the signed checkpoint that ends it. It is what `billingd audit
// verify` runs.
//
// The chain alone shows edits to an export, not a rewrite: whoever can
// write the database (or edit an export) can re-hash and re-chain every
// line. The checkpoint, signed with keys the database does not hold, is
// what makes a rewrite show: the rewritten chain no longer ends in the
// signed hash.
package evidence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/receipt"
)

// GenesisHash is the prev_hash of an org's first event.
var GenesisHash = billing.GenesisHash

// chainVersion names the canonical encoding; a new encoding gets a new name.
// Version 2 appends the receipt's SHA-256 to version 1's record; version
// 3 appends the receipt's SHA-256 and the event's consent.
const (
	chainVersion         = "billingd-audit-v1"
	chainVersionReceipts = "billingd-audit-v2"
	chainVersionConsent  = "billingd-audit-v3"
)

// timeLayout is how the record writes an event's time: UTC with the six
// fractional digits PostgreSQL keeps.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// Hash is an event's chain hash: the lowercase hex SHA-256 of these fields,
// in this order, each written as the 8-byte big-endian length of its UTF-8
// bytes followed by the bytes:
//
//	"billingd-audit-v1", prev_hash, org, seq, id, at, event, principal,
//	client, operation, confirmation_id, outcome, reason, request_id
//
// seq and id in decimal, at in UTC as 2006-01-02T15:04:05.000000Z. An
// event whose receipt is bound into the chain (receipt_sha256 set) uses
// version 2: "billingd-audit-v2" and the same fields, then receipt_sha256.
// An event with a consent (how the person agreed, on OPERATION_EXECUTED)
// uses version 3: "billingd-audit-v3" and the same fields, then
// receipt_sha256 ("" when none) and the consent's method, human_present,
// auth_time (as the JSON states it, RFC 3339), acr and approved_by, "" for
// each that is absent. The database computes the same (audit_event_hash in
// migration 000006, audit_event_hash_v2 in 000011, audit_event_hash_v3 in
// 000012).
func Hash(e billing.ChainedEvent) string {
	fields := []string{chainVersion, e.PrevHash, e.Org, strconv.FormatInt(e.Seq, 10),
		strconv.FormatInt(e.ID, 10), e.At.UTC().Format(timeLayout), e.Event, e.Principal, e.Client,
		e.Operation, e.ConfirmationID, e.Outcome, e.Reason, e.RequestID}
	if k := e.Consent; k != nil {
		authTime := ""
		if k.AuthTime != nil {
			authTime = k.AuthTime.Format(time.RFC3339Nano)
		}
		fields[0] = chainVersionConsent
		fields = append(fields, e.ReceiptSHA256, string(k.Method), k.HumanPresent, authTime, k.ACR, k.ApprovedBy)
	} else if e.ReceiptSHA256 != "" {
		fields[0] = chainVersionReceipts
		fields = append(fields, e.ReceiptSHA256)
	}
	var rec []byte
	for _, f := range fields {
		rec = binary.BigEndian.AppendUint64(rec, uint64(len(f)))
		rec = append(rec, f...)
	}
	sum := sha256.Sum256(rec)
	return hex.EncodeToString(sum[:])
}

// ReceiptSHA256 is how the chain names a receipt: the lowercase hex SHA-256
// of the compact JWS.
func ReceiptSHA256(jws string) string {
	sum := sha256.Sum256([]byte(jws))
	return hex.EncodeToString(sum[:])
}

// Report describes a verified export.
type Report struct {
	Org      string
	Events   int
	Receipts int
	// HeadSeq and HeadHash are the last event's position and hash. A chain
	// cannot show that events after its end were cut off: compare the head
	// with one recorded elsewhere (an earlier export, a ticket) to show that.
	HeadSeq  int64
	HeadHash string
	// Checkpoint is the export's signed checkpoint, which names the head;
	// nil when the export had none and unsigned exports were allowed.
	Checkpoint *billing.Checkpoint
	// Executed lists the executed changes whose receipts verified, in
	// chain order, with how the person agreed to each.
	Executed []Executed
}

// Executed is one verified executed change of a report.
type Executed struct {
	Seq            int64
	ConfirmationID string
	Operation      string
	// Consent is the receipt's; nil for receipts made before consents were
	// recorded.
	Consent *billing.Consent
	// EffectiveAt is when a change scheduled for the period's end takes
	// effect (the receipt's effective_at); nil for a change made at once.
	EffectiveAt *time.Time
	// AmountInvoicedUnknown: the receipt says billingd could not identify
	// the invoice the provider made for the change (contract §6).
	AmountInvoicedUnknown bool
}

// InvoicedText describes what a receipt states was invoiced, for people:
// "" unless the amount is unknown, which must never read as an amount.
func InvoicedText(x Executed) string {
	if x.AmountInvoicedUnknown {
		return "amount invoiced: unknown"
	}
	return ""
}

// ConsentText describes a consent for people: "agent_relayed (human
// present: none)", "approved by admin-2 (human present: attested)",
// "mandate mdt_… (human present: none)".
func ConsentText(k *billing.Consent) string {
	if k == nil {
		return "not recorded"
	}
	text := string(k.Method)
	if k.ApprovedBy != "" {
		text += " by " + k.ApprovedBy
	}
	if k.MandateID != "" {
		text += " " + k.MandateID
	}
	if k.AuthTime != nil {
		text += ", signed in at " + k.AuthTime.UTC().Format(time.RFC3339)
	}
	if k.ACR != "" {
		text += ", acr " + k.ACR
	}
	return text + " (human present: " + k.HumanPresent + ")"
}

// LineError names the first line that does not verify (1-based).
type LineError struct {
	Line   int
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// maxLine bounds one exported line (an event with its receipt).
const maxLine = 1 << 20

// Options changes what Verify accepts.
type Options struct {
	// AllowUnsigned accepts an export without its checkpoint line (one
	// from a billingd before checkpoints, or cut before its end). Such an
	// export shows edits, not a rewrite.
	AllowUnsigned bool
}

// Verify reads an export (JSON Lines, oldest first, then the checkpoint
// line) and checks that it is one unbroken chain of one org starting at its
// first event, that every hash is the hash of its line, that every receipt
// is signed by one of keys and describes the event it is attached to, that
// an executed change of chain version 2 or later carries its receipt, and
// that the export ends with a checkpoint signed by one of keys naming its
// last event. The first problem is returned as a *LineError.
func Verify(r io.Reader, keys jose.JSONWebKeySet, opts Options) (Report, error) {
	var rep Report
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLine)
	prev := billing.ChainedEvent{Hash: GenesisHash}
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			return rep, &LineError{line, "empty line"}
		}
		if rep.Checkpoint != nil {
			return rep, &LineError{line, "a line after the checkpoint: the checkpoint must end the export"}
		}
		if cp, ok := decodeCheckpoint(sc.Bytes()); ok {
			claims, err := checkCheckpoint(cp, rep, keys)
			if err != nil {
				return rep, &LineError{line, err.Error()}
			}
			rep.Checkpoint = &claims
			continue
		}
		e, err := decodeLine(sc.Bytes())
		if err != nil {
			return rep, &LineError{line, err.Error()}
		}
		if err := checkEvent(prev, e, rep.Org, keys, &rep); err != nil {
			return rep, &LineError{line, err.Error()}
		}
		rep.Org, rep.Events, rep.HeadSeq, rep.HeadHash = e.Org, rep.Events+1, e.Seq, e.Hash
		prev = e
	}
	if err := sc.Err(); err != nil {
		return rep, &LineError{line + 1, "unreadable: " + err.Error()}
	}
	if line == 0 {
		return rep, errors.New("the export is empty")
	}
	if rep.Checkpoint == nil && !opts.AllowUnsigned {
		return rep, &LineError{line + 1, "the signed checkpoint is missing: the export was cut, or is " +
			"unsigned (--allow-unsigned accepts it, checking the chain alone)"}
	}
	return rep, nil
}

// checkEvent checks one event line after prev, and its receipt, adding the
// receipt to rep.
func checkEvent(prev, e billing.ChainedEvent, org string, keys jose.JSONWebKeySet, rep *Report) error {
	if reason := checkLink(prev, e, org); reason != "" {
		return errors.New(reason)
	}
	if e.ReceiptSHA256 != "" && e.Receipt == "" {
		return errors.New("the receipt bound into the chain is missing: it was removed")
	}
	if e.ReceiptSHA256 != "" && ReceiptSHA256(e.Receipt) != e.ReceiptSHA256 {
		return errors.New("the receipt is not the one bound into the chain: it was replaced")
	}
	// From chain version 2 on, billingd binds every executed change's
	// receipt into the chain; one without was stripped, or never signed
	// (billingd logs "executed change recorded without a receipt" then):
	// either way the change has no evidence, and verify says so.
	if e.Event == billing.EventOperationExecuted && chainVersionOf(e) >= 2 && e.Receipt == "" {
		return fmt.Errorf("an %s event of chain version %d carries no receipt: it was removed, or never signed",
			billing.EventOperationExecuted, chainVersionOf(e))
	}
	if e.Receipt == "" {
		return nil
	}
	claims, err := checkReceipt(e, keys)
	if err != nil {
		return err
	}
	rep.Receipts++
	rep.Executed = append(rep.Executed, Executed{Seq: e.Seq, ConfirmationID: e.ConfirmationID,
		Operation: e.Operation, Consent: e.Consent, EffectiveAt: claims.EffectiveAt,
		AmountInvoicedUnknown: claims.AmountInvoicedUnknown})
	return nil
}

// chainVersionOf is the version of the canonical encoding Hash uses for e.
func chainVersionOf(e billing.ChainedEvent) int {
	switch {
	case e.Consent != nil:
		return 3
	case e.ReceiptSHA256 != "":
		return 2
	}
	return 1
}

// decodeCheckpoint reads a checkpoint line; ok is false for any other line.
func decodeCheckpoint(data []byte) (string, bool) {
	var cp billing.ExportCheckpointLine
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil || cp.Checkpoint == "" || dec.More() {
		return "", false
	}
	return cp.Checkpoint, true
}

// checkCheckpoint verifies a checkpoint and that it names the head of the
// chain read so far.
func checkCheckpoint(jws string, rep Report, keys jose.JSONWebKeySet) (billing.Checkpoint, error) {
	c, err := receipt.VerifyCheckpoint(jws, keys)
	if err != nil {
		return c, fmt.Errorf("checkpoint: %w", err)
	}
	head := rep.HeadHash
	if rep.Events == 0 {
		head = GenesisHash
	}
	switch {
	case rep.Org != "" && c.Org != rep.Org:
		return c, errors.New("the checkpoint is of another org")
	case c.Seq != rep.HeadSeq || c.Hash != head:
		return c, fmt.Errorf("the checkpoint signed seq %d hash %s, but the chain ends at seq %d hash %s: "+
			"the chain was rewritten, or cut, after it was signed", c.Seq, c.Hash, rep.HeadSeq, head)
	}
	return c, nil
}

func decodeLine(data []byte) (billing.ChainedEvent, error) {
	var e billing.ChainedEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, errors.New("not an exported event (bad JSON)")
	}
	if dec.More() {
		return e, errors.New("more than one JSON value on the line")
	}
	return e, nil
}

// checkLink checks e against the line before it.
func checkLink(prev, e billing.ChainedEvent, org string) string {
	switch {
	case org != "" && e.Org != org:
		return "event of another org"
	case e.Seq != prev.Seq+1:
		return fmt.Sprintf("sequence %d where %d was expected: a line was removed, added or moved", e.Seq, prev.Seq+1)
	case e.PrevHash != prev.Hash:
		return "prev_hash is not the previous line's hash: a line was removed, added or moved"
	case Hash(e) != e.Hash:
		return "hash does not match the line's content: the line was changed"
	}
	return ""
}

// checkReceipt verifies a receipt and that it belongs to its line, and
// returns its claims.
func checkReceipt(e billing.ChainedEvent, keys jose.JSONWebKeySet) (billing.ReceiptClaims, error) {
	c, err := receipt.Verify(e.Receipt, keys)
	if err != nil {
		return c, fmt.Errorf("receipt: %w", err)
	}
	if e.Event != billing.EventOperationExecuted || c.ConfirmationID != e.ConfirmationID || c.Org != e.Org ||
		string(c.Operation) != e.Operation {
		return c, errors.New("receipt does not describe this event")
	}
	if !sameConsent(c.Consent, e.Consent) {
		return c, errors.New("receipt and event state different consents")
	}
	return c, nil
}

// sameConsent reports whether a receipt's consent and its event's agree.
// Receipts signed before consents were recorded have none, nor do their
// events.
func sameConsent(a, b *billing.Consent) bool {
	if a == nil || b == nil {
		return a == b
	}
	sameTime := a.AuthTime == nil && b.AuthTime == nil ||
		a.AuthTime != nil && b.AuthTime != nil && a.AuthTime.Equal(*b.AuthTime)
	return a.Method == b.Method && a.HumanPresent == b.HumanPresent && a.ACR == b.ACR &&
		a.ApprovedBy == b.ApprovedBy && sameTime
}

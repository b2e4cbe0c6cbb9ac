package evidence

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/receipt"
)

// chain builds a valid export of n events of org acme; the third is an
// executed change with a receipt signed by keys.
func chain(t *testing.T, keys *receipt.Keys, n int) []string {
	t.Helper()
	prev := GenesisHash
	var lines []string
	for i := 1; i <= n; i++ {
		e := billing.ChainedEvent{AuditEvent: billing.AuditEvent{ID: int64(100 + i),
			At: time.Date(2026, 5, 12, 10, 0, i, 123456000, time.UTC), Event: billing.EventTokenIssued, Org: "acme",
			Principal: "alice", Operation: "upgrade_plan", ConfirmationID: "cfm_1", Outcome: "ok"},
			Seq: int64(i), PrevHash: prev}
		if i == 3 {
			e.Event = billing.EventOperationExecuted
			jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
				Operation: billing.OpUpgrade})
			if err != nil {
				t.Fatal(err)
			}
			e.Receipt, e.ReceiptSHA256 = jws, ReceiptSHA256(jws)
		}
		e.Hash = Hash(e)
		prev = e.Hash
		line, _ := json.Marshal(e)
		lines = append(lines, string(line))
	}
	return lines
}

func testKeys(t *testing.T) *receipt.Keys {
	t.Helper()
	pemData, err := receipt.GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := receipt.ParsePrivateKeyPEM(pemData)
	if err != nil {
		t.Fatal(err)
	}
	k, err := receipt.NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestVerify(t *testing.T) {
	keys := testKeys(t)
	good := chain(t, keys, 5)
	edit := func(i int, from, to string) []string {
		out := append([]string(nil), good...)
		out[i] = strings.Replace(out[i], from, to, 1)
		return out
	}
	tests := []struct {
		name     string
		lines    []string
		jwks     jose.JSONWebKeySet
		wantLine int // 0: valid
	}{
		{"valid", good, keys.JWKS(), 0},
		{"edited field", edit(1, `"principal":"alice"`, `"principal":"bob"`), keys.JWKS(), 2},
		{"edited time", edit(3, `.123456Z`, `.123457Z`), keys.JWKS(), 4},
		{"deleted line", append(append([]string(nil), good[:2]...), good[3:]...), keys.JWKS(), 3},
		{"deleted first line", good[1:], keys.JWKS(), 1},
		{"reordered", []string{good[0], good[2], good[1], good[3], good[4]}, keys.JWKS(), 2},
		{"duplicated", append(append([]string(nil), good...), good[4]), keys.JWKS(), 6},
		{"receipt of unknown key", good, testKeys(t).JWKS(), 3},
		{"receipt moved to another line", edit(3, `"outcome":"ok"`, `"outcome":"ok","receipt":"`+receiptOf(t, good[2])+`"`), keys.JWKS(), 4},
		{"receipt removed", edit(2, `,"receipt":"`+receiptOf(t, good[2])+`"`, ``), keys.JWKS(), 3},
		{"receipt and its hash removed", edit(2, `,"receipt":"`+receiptOf(t, good[2])+`","receipt_sha256":"`+ReceiptSHA256(receiptOf(t, good[2]))+`"`, ``), keys.JWKS(), 3},
		{"another receipt in its place", edit(2, receiptOf(t, good[2]), otherReceipt(t, keys)), keys.JWKS(), 3},
		{"unknown field", edit(0, `{"id"`, `{"extra":1,"id"`), keys.JWKS(), 1},
		{"not JSON", []string{"hello"}, keys.JWKS(), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Verify(strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), tt.jwks)
			if tt.wantLine == 0 {
				if err != nil || rep.Events != 5 || rep.Receipts != 1 || rep.HeadSeq != 5 {
					t.Fatalf("Verify = %+v, %v", rep, err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tt.wantLine {
				t.Fatalf("Verify error %v, want one naming line %d", err, tt.wantLine)
			}
		})
	}
	if _, err := Verify(strings.NewReader(""), keys.JWKS()); err == nil {
		t.Fatal("an empty export verified")
	}
}

// otherReceipt is a genuine receipt of keys for the same change as
// chain's, with other terms.
func otherReceipt(t *testing.T, keys *receipt.Keys) string {
	t.Helper()
	jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
		Operation: billing.OpUpgrade, AmountDueNowCents: 1})
	if err != nil {
		t.Fatal(err)
	}
	return jws
}

func receiptOf(t *testing.T, line string) string {
	t.Helper()
	var e billing.ChainedEvent
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Receipt == "" {
		t.Fatalf("no receipt in %s", line)
	}
	return e.Receipt
}

// TestHashPinned pins version 1 of the encoding: a change to Hash must be a
// new version, or every exported chain stops verifying.
func TestHashPinned(t *testing.T) {
	e := billing.ChainedEvent{AuditEvent: billing.AuditEvent{ID: 7, At: time.Date(2026, 5, 12, 10, 1, 0, 500000000, time.FixedZone("CEST", 7200)),
		Event: "TOKEN_ISSUED", Org: "acme", Principal: "Zoë", RequestID: "r1"}, Seq: 3, PrevHash: GenesisHash}
	const want = "5525c709944ae756bdb3e60d2139a53ba8dfa7818dec2321ad1c93077cab0623" // also SQL audit_event_hash's answer
	if got := Hash(e); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
	// Version 2, an event with its receipt bound in (SQL audit_event_hash_v2).
	e.Event, e.ReceiptSHA256 = "OPERATION_EXECUTED", ReceiptSHA256("header.claims.signature")
	const wantV2 = "acc3ee1935c6cd16e3615774800920f76879f4f0ad79be979c40fdbe7d1c1908"
	if got := Hash(e); got != wantV2 {
		t.Fatalf("Hash (v2) = %s, want %s", got, wantV2)
	}
}

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

// unsigned lets the tests of the chain alone go without checkpoints.
var unsigned = Options{AllowUnsigned: true}

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
	signer, err := receipt.KeySigner(key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := receipt.NewKeys(signer)
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
			rep, err := Verify(strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), tt.jwks, unsigned)
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
	if _, err := Verify(strings.NewReader(""), keys.JWKS(), unsigned); err == nil {
		t.Fatal("an empty export verified")
	}
}

// otherReceipt is a genuine receipt of keys for the same change as
// chain's, with other terms.
func otherReceipt(t *testing.T, keys *receipt.Keys) string {
	t.Helper()
	jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
		Operation: billing.OpUpgrade, AmountDueNowCents: new(int64(1))})
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

// TestVerifyConsent: an executed change's consent is on its event (in the
// hash, version 2) and in its receipt (signed); an export whose chain was
// rebuilt around a stronger consent still fails, on the receipt.
func TestVerifyConsent(t *testing.T) {
	keys := testKeys(t)
	relayed := &billing.Consent{Method: billing.ConsentAgentRelayed, HumanPresent: billing.HumanNone}
	verified := &billing.Consent{Method: billing.ConsentVerifiedSignIn, HumanPresent: billing.HumanVerified}
	build := func(onEvent, inReceipt *billing.Consent) string {
		e := billing.ChainedEvent{AuditEvent: billing.AuditEvent{ID: 1, At: time.Date(2026, 11, 24, 23, 0, 0, 0, time.UTC),
			Event: billing.EventOperationExecuted, Org: "acme", Principal: "alice", Operation: "upgrade_plan",
			ConfirmationID: "cfm_1", Outcome: "ok", Consent: onEvent}, Seq: 1, PrevHash: GenesisHash}
		jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
			Operation: billing.OpUpgrade, Consent: inReceipt})
		if err != nil {
			t.Fatal(err)
		}
		e.Receipt = jws
		e.Hash = Hash(e) // a chain rebuilt by whoever edited it
		line, _ := json.Marshal(e)
		return string(line) + "\n"
	}
	rep, err := Verify(strings.NewReader(build(relayed, relayed)), keys.JWKS(), unsigned)
	if err != nil || len(rep.Executed) != 1 || rep.Executed[0].Consent == nil || rep.Executed[0].Consent.Method != billing.ConsentAgentRelayed {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	if got := ConsentText(rep.Executed[0].Consent); got != "agent_relayed (human present: none)" {
		t.Errorf("ConsentText = %q", got)
	}
	for name, line := range map[string]string{
		"stronger consent on the event":  build(verified, relayed),
		"consent dropped from the event": build(nil, relayed),
		"consent added to the event":     build(relayed, nil),
	} {
		if _, err := Verify(strings.NewReader(line), keys.JWKS(), unsigned); err == nil || !strings.Contains(err.Error(), "different consents") {
			t.Errorf("%s: %v, want the receipt to disagree", name, err)
		}
	}
}

// TestHashPinnedV3 pins version 3 (events with a consent), as SQL's
// audit_event_hash_v3 computes it (internal/postgres checks that they
// agree).
func TestHashPinnedV3(t *testing.T) {
	at := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	e := billing.ChainedEvent{AuditEvent: billing.AuditEvent{ID: 7, At: time.Date(2026, 11, 24, 23, 1, 0, 500000000, time.UTC),
		Event: "OPERATION_EXECUTED", Org: "acme", Principal: "Zoë", RequestID: "r1",
		Consent: &billing.Consent{Method: billing.ConsentVerifiedSignIn, HumanPresent: billing.HumanVerified, AuthTime: &at, ACR: "mfa"}},
		Seq: 3, PrevHash: GenesisHash}
	v1 := e
	v1.Consent = nil
	if Hash(e) == Hash(v1) {
		t.Fatal("the consent is not part of the hash")
	}
	const want = "13ad0eb6d060e5cc8de1489168b79e29512b3ca15b2bd8553b711818a0dbd9b5" // also SQL audit_event_hash_v3's answer
	if got := Hash(e); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
}

// signed ends lines with the checkpoint of their last event, signed by keys.
func signed(t *testing.T, keys *receipt.Keys, lines []string) []string {
	t.Helper()
	var last billing.ChainedEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	jws, err := keys.SignCheckpoint(billing.Checkpoint{Org: last.Org, Seq: last.Seq, Hash: last.Hash, IssuedAt: 1764000000})
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(billing.ExportCheckpointLine{Checkpoint: jws})
	return append(append([]string(nil), lines...), string(line))
}

// rechain is what whoever can write the database, or edit an export, can
// do without any key: change events, then recompute every hash and
// prev_hash from the first line on, exactly as billingd does (Hash), so
// that the chain itself is whole again. The checkpoint line, if any, is
// kept as it was.
func rechain(t *testing.T, lines []string, edit func(*billing.ChainedEvent)) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	prev := GenesisHash
	for _, l := range lines {
		if _, ok := decodeCheckpoint([]byte(l)); ok {
			out = append(out, l)
			continue
		}
		var e billing.ChainedEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		edit(&e)
		e.PrevHash = prev
		e.Hash = Hash(e)
		prev = e.Hash
		line, _ := json.Marshal(e)
		out = append(out, string(line))
	}
	return out
}

// TestVerifyCheckpoint: an export ends with a checkpoint signed with the
// receipt keys; without it verify fails unless unsigned exports are
// allowed, and a chain rewritten, re-hashed and re-chained after it no
// longer ends where the checkpoint says.
func TestVerifyCheckpoint(t *testing.T) {
	keys := testKeys(t)
	forger := testKeys(t) // a key that is not published
	good := chain(t, keys, 5)
	rcpt := receiptOf(t, good[2])
	consent := &billing.Consent{Method: billing.ConsentPersonSession, HumanPresent: billing.HumanAttested}
	withConsent := rechain(t, good, func(e *billing.ChainedEvent) {
		if e.Event == billing.EventOperationExecuted {
			jws, err := keys.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
				Operation: billing.OpUpgrade, Consent: consent})
			if err != nil {
				t.Fatal(err)
			}
			e.Consent, e.Receipt, e.ReceiptSHA256 = consent, jws, ReceiptSHA256(jws)
		}
	})
	tests := []struct {
		name     string
		lines    []string
		opts     Options
		wantLine int // 0: valid
		want     string
	}{
		{"signed", signed(t, keys, good), Options{}, 0, ""},
		{"unsigned", good, Options{}, 6, "checkpoint is missing"},
		{"unsigned, allowed", good, unsigned, 0, ""},
		// A rewrite of an event, re-hashed and re-chained: the chain is whole
		// but ends elsewhere than the checkpoint says.
		{"rewritten and re-chained", rechain(t, signed(t, keys, good), func(e *billing.ChainedEvent) {
			if e.Seq == 2 {
				e.Principal = "mallory"
			}
		}), Options{}, 6, "rewritten"},
		// The forgery: consent raised, receipt re-signed with a key
		// that is not published, chain rebuilt.
		{"consent raised, receipt re-signed", rechain(t, signed(t, keys, withConsent), func(e *billing.ChainedEvent) {
			if e.Event == billing.EventOperationExecuted {
				e.Consent = &billing.Consent{Method: billing.ConsentVerifiedSignIn, HumanPresent: billing.HumanVerified}
				jws, err := forger.SignReceipt(billing.ReceiptClaims{Org: "acme", Subject: "alice", ConfirmationID: "cfm_1",
					Operation: billing.OpUpgrade, Consent: e.Consent})
				if err != nil {
					t.Fatal(err)
				}
				e.Receipt, e.ReceiptSHA256 = jws, ReceiptSHA256(jws)
			}
		}), Options{}, 3, "not among the published keys"},
		// Receipts stripped and the event turned back into chain version 1:
		// every line checks, the checkpoint does not.
		{"receipts stripped, version 1, re-chained", rechain(t, signed(t, keys, withConsent), func(e *billing.ChainedEvent) {
			e.Consent, e.Receipt, e.ReceiptSHA256 = nil, "", ""
		}), Options{}, 6, "rewritten"},
		{"receipt stripped from a version 3 event", rechain(t, withConsent, func(e *billing.ChainedEvent) {
			e.Receipt, e.ReceiptSHA256 = "", ""
		}), unsigned, 3, "carries no receipt"},
		{"cut after the checkpoint was signed", append(append([]string(nil), good[:4]...), signed(t, keys, good)[5]),
			Options{}, 5, "rewritten, or cut"},
		{"checkpoint of an unpublished key", signed(t, forger, good), Options{}, 6, "not among the published keys"},
		{"a receipt as the checkpoint", append(append([]string(nil), good...), `{"checkpoint":"`+rcpt+`"}`),
			Options{}, 6, "typ"},
		{"a line after the checkpoint", append(signed(t, keys, good), good[4]), Options{}, 7, "after the checkpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Verify(strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), keys.JWKS(), tt.opts)
			if tt.wantLine == 0 {
				if err != nil || rep.Events != 5 || (tt.opts.AllowUnsigned != (rep.Checkpoint == nil)) {
					t.Fatalf("Verify = %+v, %v", rep, err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tt.wantLine || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify error %v, want one naming line %d: %s", err, tt.wantLine, tt.want)
			}
		})
	}
}

// TestConsentTextNamesTheMandate: a change made under a standing mandate
// says which, for the person reading the verification report.
func TestConsentTextNamesTheMandate(t *testing.T) {
	k := &billing.Consent{Method: billing.ConsentMandate, HumanPresent: billing.HumanNone, MandateID: "mdt_abc"}
	if got := ConsentText(k); got != "mandate mdt_abc (human present: none)" {
		t.Fatalf("ConsentText = %q", got)
	}
}

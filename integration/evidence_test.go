package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/evidence"
	"github.com/billingd/billingd/internal/receipt"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// executedWithReceipt is the body of a second call that executed.
type executedWithReceipt struct {
	OK      bool   `json:"ok"`
	Receipt string `json:"receipt"`
}

// upgradeWithReceipt runs a whole upgrade for principal and returns the
// proposal and the receipt of the second call's answer.
func (h *harness) upgradeWithReceipt(org, principal string) (proposal, string) {
	h.t.Helper()
	tok := h.user(org, principal)
	p := h.propose(tok, "upgrade", "scale")
	r := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(h.t, r, http.StatusOK, "")
	var done executedWithReceipt
	r.decode(h.t, &done)
	if !done.OK || done.Receipt == "" {
		h.t.Fatalf("second call without a receipt: %s", r.Body)
	}
	return p, done.Receipt
}

// receiptKeys reads the published receipt keys.
func (h *harness) receiptKeys() jose.JSONWebKeySet {
	h.t.Helper()
	r := h.do("GET", "/.well-known/jwks.json", "", nil)
	wantStatus(h.t, r, http.StatusOK, "")
	var set jose.JSONWebKeySet
	r.decode(h.t, &set)
	if len(set.Keys) == 0 {
		h.t.Fatalf("no receipt keys published: %s", r.Body)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			h.t.Fatal("a private key is published")
		}
	}
	return set
}

// TestReceipts: an executed change's receipt verifies with the published
// keys, states what the person saw (the summary's hash) and what Stripe was
// asked to do, fails when one byte changes, and is readable by its owner and
// the org's admins only.
func TestReceipts(t *testing.T) {
	h := newHarness(t)
	acct := h.createOrg("vector", "Vector Build", "pro")
	p, jws := h.upgradeWithReceipt("vector", "alice")
	keys := h.receiptKeys()

	// The owner's repeated second call replays the answer, receipt included.
	replay := h.confirm(h.user("vector", "alice"), "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, replay, http.StatusOK, "")
	var replayed struct {
		Replayed bool   `json:"replayed"`
		Receipt  string `json:"receipt"`
	}
	replay.decode(t, &replayed)
	if !replayed.Replayed || replayed.Receipt != jws {
		t.Fatalf("replay: %s", replay.Body)
	}

	c, err := receipt.Verify(jws, keys)
	if err != nil {
		t.Fatalf("receipt does not verify with the published keys: %v", err)
	}
	sum := sha256.Sum256([]byte(p.Summary))
	want := billing.ReceiptClaims{
		Issuer: h.url, Subject: "alice", Org: "vector", Client: "test-agent", ConfirmationID: p.ConfirmationID,
		Operation: billing.OpUpgrade, From: "pro", To: "scale", QuantityFrom: 1, QuantityTo: 1, AmountDueNowCents: new(p.Details.AmountDueNowCents),
		QuotedAmountDueNowCents: p.Details.AmountDueNowCents, Currency: "usd", SummarySHA256: hex.EncodeToString(sum[:]),
		CurrencyDigits:       billing.CurrencyDigits{Exponent: 2},
		StripeSubscriptionID: acct.Subscription.StripeSubscriptionID, Livemode: false,
	}
	got := c
	got.IssuedAt, got.ProrationDate, got.ExecutedAt, got.IdempotencyKey = 0, want.ProrationDate, want.ExecutedAt, ""
	if !strings.HasPrefix(got.InvoiceID, "in_") {
		t.Fatalf("receipt names no invoice: %+v", c)
	}
	got.InvoiceID = "" // Stripe's: the amount is the invoice's (TestReceiptStatesInvoicedAmount)
	// The parts of the amount the summary stated, and how the person agreed
	// (test-agent, a client not in PERSON_CLIENTS: an agent, whose word is
	// all billingd has).
	d := p.Details
	if q := c.Quoted; q == nil || *q != (billing.QuotedAmounts{SubtotalCents: d.SubtotalCents, DiscountCents: d.DiscountCents,
		TaxCents: d.TaxCents, CreditAppliedCents: d.CreditAppliedCents, AmountDueNowCents: d.AmountDueNowCents}) {
		t.Fatalf("receipt's quoted amounts %+v, details %+v", c.Quoted, d)
	}
	if k := c.Consent; k == nil || *k != (billing.Consent{Method: billing.ConsentAgentRelayed, HumanPresent: billing.HumanNone}) {
		t.Fatalf("receipt's consent %+v", c.Consent)
	}
	got.Quoted, got.Consent = nil, nil
	if got.AmountDueNowCents == nil || *got.AmountDueNowCents != *want.AmountDueNowCents {
		t.Fatalf("receipt's amount %v, want %d", got.AmountDueNowCents, *want.AmountDueNowCents)
	}
	got.AmountDueNowCents, want.AmountDueNowCents = nil, nil // pointers: compared above
	if got != want {
		t.Fatalf("receipt claims\n got %+v\nwant %+v", got, want)
	}
	if c.IdempotencyKey == "" || c.ExecutedAt.IsZero() || !c.ProrationDate.Equal(p.Details.EffectiveAt) {
		t.Fatalf("receipt claims %+v", c)
	}

	// One byte changed in the payload: no longer valid.
	parts := strings.Split(jws, ".")
	payload := []byte(parts[1])
	payload[len(payload)/2] ^= 0x01
	if _, err := receipt.Verify(parts[0]+"."+string(payload)+"."+parts[2], keys); err == nil {
		t.Fatal("a receipt with a changed byte verified")
	}

	path := "/api/billing/confirmations/" + p.ConfirmationID + "/receipt"
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"owner", h.token("vector", "alice", auth.ScopeRead), http.StatusOK},
		{"admin of the org", h.admin("vector", "carol"), http.StatusOK},
		{"another person of the org", h.user("vector", "mallory"), http.StatusNotFound},
		{"admin of another org", h.admin("other", "alice"), http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do("GET", path, tc.token, nil)
			wantStatus(t, r, tc.status, "")
			if tc.status != http.StatusOK {
				if r.errorCode(t) != "not_found" {
					t.Fatalf("%s", r.Body)
				}
				return
			}
			var body billing.ReceiptView
			r.decode(t, &body)
			if body.Receipt != jws || body.ConfirmationID != p.ConfirmationID || body.Summary != p.Summary {
				t.Fatalf("receipt endpoint: %s", r.Body)
			}
		})
	}
	wantStatus(t, h.do("GET", "/api/billing/confirmations/cfm_nope/receipt", h.admin("vector", "carol"), nil),
		http.StatusNotFound, "not_found")
}

// TestReceiptKeyRotation: with a new key listed first, new receipts are
// signed with it and receipts signed with the old key still verify with the
// published set.
func TestReceiptKeyRotation(t *testing.T) {
	dir := t.TempDir()
	oldKey, newKey := filepath.Join(dir, "old.pem"), filepath.Join(dir, "new.pem")
	for _, path := range []string{oldKey, newKey} {
		pemData, err := receipt.GenerateKeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, pemData, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, withEnv("RECEIPT_SIGNING_KEYS", oldKey))
	h.createOrg("vector", "Vector Build", "pro")
	_, before := h.upgradeWithReceipt("vector", "alice")

	rotated := *h
	rotated.env = map[string]string{}
	for k, v := range h.env {
		rotated.env[k] = v
	}
	rotated.env["RECEIPT_SIGNING_KEYS"] = newKey + "," + oldKey
	r := rotated.replica()
	keys := r.receiptKeys()
	if len(keys.Keys) != 2 {
		t.Fatalf("%d keys published after the rotation, want 2", len(keys.Keys))
	}
	if _, err := receipt.Verify(before, keys); err != nil {
		t.Fatalf("a receipt of the old key no longer verifies: %v", err)
	}
	p := r.propose(r.user("vector", "alice"), "downgrade", "pro")
	res := r.confirm(r.user("vector", "alice"), "downgrade", "pro", p.ConfirmToken)
	wantStatus(t, res, http.StatusOK, "")
	var done executedWithReceipt
	res.decode(t, &done)
	after, err := jose.ParseSignedCompact(done.Receipt, receipt.Algorithms)
	if err != nil {
		t.Fatal(err)
	}
	if kid := after.Signatures[0].Protected.KeyID; kid != keys.Keys[0].KeyID {
		t.Fatalf("signed with %s, want the newest key %s", kid, keys.Keys[0].KeyID)
	}
	if _, err := receipt.Verify(done.Receipt, h.receiptKeys()); err == nil {
		t.Fatal("a receipt of the new key verified with the old key set")
	}
}

// TestReplicasPublishEachOthersKeys: without RECEIPT_SIGNING_KEYS (test
// mode) each replica signs with a key of its own, held in memory, and every
// replica publishes every replica's key: a receipt and an export's
// checkpoint made by one verify with the keys another publishes.
func TestReplicasPublishEachOthersKeys(t *testing.T) {
	h := newHarness(t)
	r := h.replica()
	a, b := h.receiptKeys(), r.receiptKeys()
	if len(a.Keys) != 2 || len(b.Keys) != 2 || a.Keys[0].KeyID == a.Keys[1].KeyID {
		t.Fatalf("replicas publish %d and %d keys, want both replicas' keys", len(a.Keys), len(b.Keys))
	}
	h.createOrg("vector", "Vector Build", "pro")
	_, jws := h.upgradeWithReceipt("vector", "alice")
	if _, err := receipt.Verify(jws, b); err != nil {
		t.Fatalf("the other replica's keys do not verify the receipt: %v", err)
	}
	rep, err := evidence.Verify(bytes.NewReader(r.exportAudit("vector")), a, evidence.Options{})
	if err != nil || rep.Checkpoint == nil || rep.Receipts != 1 {
		t.Fatalf("an export of one replica with the keys of the other: %+v, %v", rep, err)
	}
}

// receiptKeyFile writes a new receipt signing key and returns its path.
func receiptKeyFile(t *testing.T) string {
	t.Helper()
	pemData, err := receipt.GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "receipt.pem")
	if err := os.WriteFile(path, pemData, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// exportAudit fetches the org's audit export.
func (h *harness) exportAudit(org string) []byte {
	h.t.Helper()
	r := h.do("GET", "/api/billing/audit/export", h.admin(org, "auditor"), nil)
	wantStatus(h.t, r, http.StatusOK, "")
	if ct := r.Header.Get("Content-Type"); ct != "application/jsonl" {
		h.t.Fatalf("export Content-Type %q", ct)
	}
	return r.Body
}

// TestAuditExportAndVerify: the export is the org's chain oldest first with
// receipts inline; billingd audit verify accepts it and rejects it, naming
// the line, after a line is edited, deleted or moved.
func TestAuditExportAndVerify(t *testing.T) {
	h := newHarness(t)
	h.createOrg("vector", "Vector Build", "pro")
	h.createOrg("other", "Other", "pro")
	_, jws := h.upgradeWithReceipt("vector", "alice")
	h.upgradeWithReceipt("other", "bob")
	p := h.propose(h.user("vector", "alice"), "downgrade", "pro")
	wantStatus(t, h.confirm(h.user("vector", "alice"), "downgrade", "free", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")

	export := h.exportAudit("vector")
	lines := strings.Split(strings.TrimSuffix(string(export), "\n"), "\n")
	var last billing.ExportCheckpointLine
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Checkpoint == "" {
		t.Fatalf("the export does not end with its checkpoint: %s", lines[len(lines)-1])
	}
	var events []billing.ChainedEvent
	for _, l := range lines[:len(lines)-1] {
		var e billing.ChainedEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("export line %q: %v", l, err)
		}
		events = append(events, e)
	}
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = e.Event
		if e.Org != "vector" || e.Seq != int64(i+1) {
			t.Fatalf("line %d: %+v", i+1, e)
		}
		if (e.Receipt != "") != (e.Event == billing.EventOperationExecuted) {
			t.Fatalf("line %d: receipt %q on %s", i+1, e.Receipt, e.Event)
		}
	}
	if got := strings.Join(names, " "); got != "TOKEN_ISSUED TOKEN_VALIDATED OPERATION_EXECUTED TOKEN_ISSUED TOKEN_REJECTED" {
		t.Fatalf("export events: %s", got)
	}
	if events[2].Receipt != jws {
		t.Fatal("the export's receipt is not the one the second call returned")
	}
	// Only admins export.
	wantStatus(t, h.do("GET", "/api/billing/audit/export", h.user("vector", "alice"), nil), http.StatusForbidden, "insufficient_scope")

	dir := t.TempDir()
	jwks, _ := json.Marshal(h.receiptKeys())
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	c := cli{t: t, bin: billingdBinary(t), env: []string{"PATH=" + os.Getenv("PATH")}}
	verify := func(name string, content []string, wantLine string) {
		t.Helper()
		file := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(content, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := c.run("audit", "verify", "--jwks", jwksFile, file)
		if wantLine == "" {
			if code != 0 || !strings.HasPrefix(stdout, "verified: org vector, 5 events, 1 receipts") ||
				// How the person agreed to each executed change.
				!strings.Contains(stdout, "\n  seq 3 "+events[2].ConfirmationID+" upgrade_plan: consent agent_relayed (human present: none)\n") {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
			}
			return
		}
		if code == 0 || !strings.Contains(stderr, wantLine+":") {
			t.Fatalf("%s: exit %d, stderr %q, want it to name %s", name, code, stderr, wantLine)
		}
	}
	verify("untouched", lines, "")

	edited := append([]string(nil), lines...)
	edited[1] = strings.Replace(edited[1], `"principal":"alice"`, `"principal":"bob"`, 1)
	verify("edited", edited, "line 2")

	deleted := append(append([]string(nil), lines[:3]...), lines[4:]...)
	verify("deleted", deleted, "line 4")

	reordered := append([]string(nil), lines...)
	reordered[3], reordered[4] = reordered[4], reordered[3]
	verify("reordered", reordered, "line 4")

	forged := append([]string(nil), lines...)
	forged[2] = strings.Replace(forged[2], jws, jws[:len(jws)-6]+"AAAAAA", 1)
	verify("forged receipt", forged, "line 3")

	// A stronger consent claimed on the line: the chain hash says no.
	claimed := append([]string(nil), lines...)
	claimed[2] = strings.Replace(claimed[2], `"method":"agent_relayed","human_present":"none"`,
		`"method":"verified_sign_in","human_present":"verified"`, 1)
	if claimed[2] == lines[2] {
		t.Fatalf("no consent on the executed line: %s", lines[2])
	}
	verify("consent claimed", claimed, "line 3")

	// Over the same keys published at the URL, and from stdin.
	cmd := exec.Command(c.bin, "audit", "verify", "--jwks", h.url+"/.well-known/jwks.json", "-")
	cmd.Env, cmd.Stdin = c.env, bytes.NewReader(export)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "verified:") {
		t.Fatalf("verify from stdin with the JWKS URL: %v: %s", err, out)
	}
}

// TestTestModeStated: with a test-mode Stripe key, summaries over REST and
// MCP end with the test-mode notice and details say livemode false; with a
// live key there is no notice and livemode is true.
func TestTestModeStated(t *testing.T) {
	const notice = " Test mode: no real money moves."
	h := newHarness(t) // sk_test_…
	h.createOrg("vector", "Vector Build", "pro")
	p := h.propose(h.user("vector", "alice"), "upgrade", "scale")
	if !strings.HasSuffix(p.Summary, notice) || p.Details.Livemode {
		t.Fatalf("REST test mode: %q, livemode %t", p.Summary, p.Details.Livemode)
	}
	cs := mcpConnect(t, h.url, h.mcpToken("vector", "bob", "claude-desktop", auth.ScopeRead, auth.ScopeWrite), "")
	first := callTool(t, cs, "downgrade_plan", map[string]any{"to": "free"})
	var mp proposal
	wantSuccess(t, first, &mp)
	if !strings.HasSuffix(mp.Summary, notice) || mp.Details.Livemode || texts(first)[0] != mp.Summary {
		t.Fatalf("MCP test mode: %q, livemode %t", mp.Summary, mp.Details.Livemode)
	}

	live := newHarness(t, withEnv("STRIPE_SECRET_KEY", "sk_live_billingd"), // stripe-mock refuses live keys
		withEnv("RECEIPT_SIGNING_KEYS", receiptKeyFile(t)))
	live.createOrg("vector", "Vector Build", "pro")
	lp := live.propose(live.user("vector", "alice"), "upgrade", "scale")
	if strings.Contains(lp.Summary, "Test mode") || !lp.Details.Livemode {
		t.Fatalf("live key: %q, livemode %t", lp.Summary, lp.Details.Livemode)
	}
	lcs := mcpConnect(t, live.url, live.mcpToken("vector", "bob", "claude-desktop", auth.ScopeRead, auth.ScopeWrite), "")
	var lmp proposal
	wantSuccess(t, callTool(t, lcs, "downgrade_plan", map[string]any{"to": "free"}), &lmp)
	if strings.Contains(lmp.Summary, "Test mode") || !lmp.Details.Livemode {
		t.Fatalf("MCP live key: %q, livemode %t", lmp.Summary, lmp.Details.Livemode)
	}
}

// TestReceiptOverMCP: an MCP second call carries the same kind of receipt
// in structuredContent, and it verifies with the published keys.
func TestReceiptOverMCP(t *testing.T) {
	h := newHarness(t)
	h.createOrg("vector", "Vector Build", "pro")
	cs := mcpConnect(t, h.url, h.mcpToken("vector", "alice", "claude-desktop", auth.ScopeRead, auth.ScopeWrite), "")
	var p proposal
	wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale"}), &p)
	var done executedWithReceipt
	wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "scale", "confirm_token": p.ConfirmToken}), &done)
	c, err := receipt.Verify(done.Receipt, h.receiptKeys())
	if err != nil {
		t.Fatalf("MCP receipt: %v", err)
	}
	if c.ConfirmationID != p.ConfirmationID || c.Client != "claude-desktop" || c.SummarySHA256 != billing.SummaryHash(p.Summary) {
		t.Fatalf("MCP receipt claims %+v", c)
	}
	// The agent presented the token: billingd has only its word.
	h.wantConsent("vector", p.ConfirmationID, billing.ConsentAgentRelayed, billing.HumanNone)
}

// TestReceiptAfterSettling: a change whose Stripe answer was a saved 500 is
// settled by the reconciler under the next idempotency key; its receipt
// names that key, verifies, and the export (one chain, one receipt) checks
// out. Stripe changed the subscription once.
func TestReceiptAfterSettling(t *testing.T) {
	h := newHarness(t, withEnv("SETTLE_INTERVAL", "300ms"))
	acct := h.createOrg("settled", "settled", "pro")
	// A person's call (PERSON_CLIENTS): person_session is recorded with the
	// attempt, which a change settled without it could not claim.
	tok := h.admin("settled", "pat")
	p := h.propose(tok, "upgrade", "scale")
	h.fake.FailNext(stripepaytest.ServerError)
	wantStatus(t, h.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusServiceUnavailable, "upstream_unavailable")
	h.eventually(10*time.Second, "the reconciler executes the change", func() bool { return h.subscription(tok) == "scale" })
	h.wantStripeChanges(acct, 1)

	r := h.do("GET", "/api/billing/confirmations/"+p.ConfirmationID+"/receipt", tok, nil)
	wantStatus(t, r, http.StatusOK, "")
	var body billing.ReceiptView
	r.decode(t, &body)
	c, err := receipt.Verify(body.Receipt, h.receiptKeys())
	if err != nil {
		t.Fatal(err)
	}
	if c.IdempotencyKey != "billingd-"+p.ConfirmationID+"-1" || c.SummarySHA256 != billing.SummaryHash(p.Summary) {
		t.Fatalf("receipt after settling: %+v", c)
	}
	// Settled by the reconciler, which has no channel: the consent is the
	// one recorded with the person's second call.
	h.wantConsent("settled", p.ConfirmationID, billing.ConsentPersonSession, billing.HumanAttested)
	// The owner's retry is answered with the settled result and its receipt.
	retry := h.confirm(tok, "upgrade", "scale", p.ConfirmToken)
	wantStatus(t, retry, http.StatusOK, "")
	var done executedWithReceipt
	retry.decode(t, &done)
	if done.Receipt != body.Receipt {
		t.Fatalf("retry after settling: %s", retry.Body)
	}
	var export bytes.Buffer
	export.Write(h.exportAudit("settled"))
	rep, err := evidence.Verify(&export, h.receiptKeys(), evidence.Options{})
	if err != nil || rep.Receipts != 1 {
		t.Fatalf("export after settling: %+v, %v", rep, err)
	}
}

// TestModeBoundIntoToken: a token issued with a test-mode key is not
// redeemed by a replica running with a live key (consent_token_mismatch),
// and nothing reaches Stripe.
func TestModeBoundIntoToken(t *testing.T) {
	h := newHarness(t) // sk_test_…
	acct, tok, p := h.pendingUpgrade("modes")
	live := *h
	live.env = map[string]string{}
	for k, v := range h.env {
		live.env[k] = v
	}
	live.env["STRIPE_SECRET_KEY"] = "sk_live_billingd"
	live.env["RECEIPT_SIGNING_KEYS"] = receiptKeyFile(t)
	r := live.replica()
	wantStatus(t, r.confirm(tok, "upgrade", "scale", p.ConfirmToken), http.StatusConflict, "consent_token_mismatch")
	h.wantStripeChanges(acct, 0)
}

// TestAuditExportStreamsLongChains: an export longer than one flush (256
// lines) streams whole and verifies.
func TestAuditExportStreamsLongChains(t *testing.T) {
	h := newHarness(t)
	events := make([]billing.AuditEvent, 600)
	for i := range events {
		events[i] = billing.AuditEvent{Event: billing.EventTokenIssued, Org: "long", Principal: "alice", RequestID: "r"}
	}
	if err := h.app.Store.AppendAudit(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	rep, err := evidence.Verify(bytes.NewReader(h.exportAudit("long")), h.receiptKeys(), evidence.Options{})
	if err != nil || rep.Events != 600 || rep.Checkpoint == nil || rep.Checkpoint.Seq != 600 {
		t.Fatalf("long export: %+v, %v", rep, err)
	}
}

// TestReceiptBoundIntoChain: an executed change's receipt is part of the
// audit chain, so an export from which it was removed, or in which another
// receipt took its place (even a genuine one of billingd's key for the same
// change, with other terms), no longer verifies, and the error names the
// line; the untouched export verifies with every receipt counted.
func TestReceiptBoundIntoChain(t *testing.T) {
	h := newHarness(t)
	h.createOrg("bound", "Bound", "pro")
	_, jws := h.upgradeWithReceipt("bound", "alice")
	p := h.propose(h.user("bound", "alice"), "downgrade", "pro")
	wantStatus(t, h.confirm(h.user("bound", "alice"), "downgrade", "pro", p.ConfirmToken), http.StatusOK, "")
	keys := h.receiptKeys()
	lines := strings.Split(strings.TrimSuffix(string(h.exportAudit("bound")), "\n"), "\n")
	executed := -1
	for i, l := range lines {
		if strings.Contains(l, `"receipt":"`+jws+`"`) {
			executed = i
		}
	}
	if executed < 0 {
		t.Fatal("no exported line carries the upgrade's receipt")
	}
	verify := func(ls []string) (evidence.Report, error) {
		return evidence.Verify(strings.NewReader(strings.Join(ls, "\n")+"\n"), keys, evidence.Options{})
	}
	if rep, err := verify(lines); err != nil || rep.Receipts != 2 {
		t.Fatalf("the export: %+v, %v", rep, err)
	}
	edited := func(edit func(map[string]any)) []string {
		var e map[string]any
		if err := json.Unmarshal([]byte(lines[executed]), &e); err != nil {
			t.Fatal(err)
		}
		edit(e)
		line, _ := json.Marshal(e)
		out := slices.Clone(lines)
		out[executed] = string(line)
		return out
	}
	// A genuine receipt of billingd's key for the same change, other terms.
	claims, err := receipt.Verify(jws, keys)
	if err != nil {
		t.Fatal(err)
	}
	claims.AmountDueNowCents = new(*claims.AmountDueNowCents + 1)
	other, err := h.app.Receipts.SignReceipt(claims)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"receipt removed", func(e map[string]any) { delete(e, "receipt") }},
		{"receipt and its hash removed", func(e map[string]any) { delete(e, "receipt"); delete(e, "receipt_sha256") }},
		{"another receipt in its place", func(e map[string]any) { e["receipt"] = other }},
		{"another receipt and its hash in its place", func(e map[string]any) {
			e["receipt"] = other
			e["receipt_sha256"] = evidence.ReceiptSHA256(other)
		}},
	} {
		var le *evidence.LineError
		if rep, err := verify(edited(tc.edit)); !errors.As(err, &le) || le.Line != executed+1 {
			t.Errorf("%s: verified %+v, %v; want an error naming line %d", tc.name, rep, err, executed+1)
		}
	}
}

// TestRechainedExportFails is issue 28's forgery: whoever can write the
// database or edit an export rewrites an executed change's consent from
// person_session to verified_sign_in, re-signs its receipt with a key of
// their own, and re-hashes and re-chains every line as billingd does; or
// strips the receipts and turns the events back into chain version 1.
// billingd audit verify fails on both against the signed checkpoint, fails
// on an export without its checkpoint unless --allow-unsigned, and fails on
// an executed change of chain version 3 that carries no receipt.
func TestRechainedExportFails(t *testing.T) {
	h := newHarness(t)
	h.createOrg("vector", "Vector Build", "pro")
	h.upgradeWithReceipt("vector", "alice")
	lines := strings.Split(strings.TrimSuffix(string(h.exportAudit("vector")), "\n"), "\n")
	events, checkpoint := lines[:len(lines)-1], lines[len(lines)-1]
	if !strings.HasPrefix(checkpoint, `{"checkpoint":"`) {
		t.Fatalf("the export ends with %s", checkpoint)
	}
	dir := t.TempDir()
	jwks, _ := json.Marshal(h.receiptKeys())
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	stolen, err := receipt.ParsePrivateKeyPEM(mustKeyPEM(t)) // not a published key
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := receipt.KeySigner(stolen)
	forger, _ := receipt.NewKeys(signer)
	c := cli{t: t, bin: billingdBinary(t), env: []string{"PATH=" + os.Getenv("PATH")}}
	verify := func(name string, content []string, args ...string) (string, int) {
		t.Helper()
		file := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(content, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := c.run(append([]string{"audit", "verify", "--jwks", jwksFile, file}, args...)...)
		return stdout + stderr, code
	}
	if out, code := verify("honest", lines); code != 0 || !strings.Contains(out, "checkpoint signed at") {
		t.Fatalf("the honest export: exit %d: %s", code, out)
	}
	raised := rechain(t, events, func(e *billing.ChainedEvent) {
		if e.Event != billing.EventOperationExecuted {
			return
		}
		claims, err := receipt.Verify(e.Receipt, h.receiptKeys())
		// The change was an agent's (agent_relayed); the forger raises it.
		if err != nil || e.Consent == nil || e.Consent.Method == billing.ConsentVerifiedSignIn {
			t.Fatalf("executed line: consent %+v, %v", e.Consent, err)
		}
		e.Consent = &billing.Consent{Method: billing.ConsentVerifiedSignIn, HumanPresent: billing.HumanVerified}
		claims.Consent = e.Consent
		if e.Receipt, err = forger.SignReceipt(claims); err != nil {
			t.Fatal(err)
		}
		e.ReceiptSHA256 = evidence.ReceiptSHA256(e.Receipt)
	})
	stripped := rechain(t, events, func(e *billing.ChainedEvent) { e.Consent, e.Receipt, e.ReceiptSHA256 = nil, "", "" })
	noReceipt := rechain(t, events, func(e *billing.ChainedEvent) { e.Receipt, e.ReceiptSHA256 = "", "" })
	for _, tc := range []struct {
		name    string
		content []string
		args    []string
		want    string
	}{
		{"consent raised, receipt re-signed, re-chained", append(raised, checkpoint), nil, "not among the published keys"},
		{"receipts stripped, version 1, re-chained", append(stripped, checkpoint), nil, "the chain was rewritten"},
		{"no checkpoint", events, nil, "checkpoint is missing"},
		{"version 3 without its receipt", noReceipt, []string{"--allow-unsigned"}, "carries no receipt"},
	} {
		if out, code := verify(strings.ReplaceAll(tc.name, " ", "_"), tc.content, tc.args...); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d: %s; want %q", tc.name, code, out, tc.want)
		}
	}
	// Unsigned exports are checked on request, for what the chain alone
	// shows: which is not a rewrite (docs/evidence.md).
	if out, code := verify("unsigned", events, "--allow-unsigned"); code != 0 || !strings.Contains(out, "UNSIGNED") {
		t.Errorf("--allow-unsigned: exit %d: %s", code, out)
	}
}

// rechain edits exported event lines and recomputes every hash and
// prev_hash with billingd's own encoding, as a forger would.
func rechain(t *testing.T, lines []string, edit func(*billing.ChainedEvent)) []string {
	t.Helper()
	prev := evidence.GenesisHash
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		var e billing.ChainedEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		edit(&e)
		e.PrevHash = prev
		e.Hash = evidence.Hash(e)
		prev = e.Hash
		line, _ := json.Marshal(e)
		out = append(out, string(line))
	}
	return out
}

func mustKeyPEM(t *testing.T) []byte {
	t.Helper()
	data, err := receipt.GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLiveKeyWithoutReceiptKeysRefused: with a live Stripe key and no
// RECEIPT_SIGNING_KEYS, billingd serve refuses to start, naming the
// variable (contract §11, key custody).
func TestLiveKeyWithoutReceiptKeysRefused(t *testing.T) {
	c := cli{t: t, bin: billingdBinary(t), env: []string{"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=postgres://127.0.0.1:1/none", "STRIPE_SECRET_KEY=sk_live_billingd",
		"OAUTH_ISSUER=https://issuer.example", "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=off"}}
	_, stderr, code := c.run("serve")
	if code == 0 || !strings.Contains(stderr, "RECEIPT_SIGNING_KEYS") {
		t.Fatalf("serve with a live key and no receipt keys: exit %d: %s", code, stderr)
	}
}

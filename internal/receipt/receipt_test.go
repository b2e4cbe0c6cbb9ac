package receipt

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/billing"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	pemData, err := GenerateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return pemData
}

func keysFrom(t *testing.T, pems ...[]byte) *Keys {
	t.Helper()
	var paths []string
	dir := t.TempDir()
	for i, p := range pems {
		path := dir + "/" + string(rune('a'+i)) + ".pem"
		if err := writeFile(path, p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	k, err := Load(context.Background(), paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k.Keys
}

func claims() billing.ReceiptClaims {
	return billing.ReceiptClaims{Issuer: "https://billing.example", Subject: "alice", Org: "acme",
		ConfirmationID: "c1", Operation: billing.OpUpgrade, From: "pro", To: "scale", AmountDueNowCents: new(int64(1742)),
		Currency: "usd", SummarySHA256: billing.SummaryHash("Upgrade …"), ExecutedAt: time.Unix(1700000000, 0).UTC()}
}

func TestSignVerify(t *testing.T) {
	k := keysFrom(t, newKey(t))
	token, err := k.SignReceipt(claims())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(token, k.JWKS())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got.ConfirmationID != "c1" || got.SummarySHA256 != claims().SummarySHA256 || got.Livemode {
		t.Fatalf("claims = %+v", got)
	}
	// Any one byte changed anywhere in the token breaks it.
	for i := range token {
		if token[i] == '.' {
			continue
		}
		b := []byte(token)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		if _, err := Verify(string(b), k.JWKS()); err == nil {
			// base64url's last character may carry unused bits; only those
			// flips can survive, and they do not change the decoded bytes.
			if !unusedBits(token, i) {
				t.Fatalf("a receipt with byte %d changed verified", i)
			}
		}
	}
}

// unusedBits reports whether position i is the last character of a
// base64url segment whose low bits are padding.
func unusedBits(token string, i int) bool {
	return i+1 == len(token) || token[i+1] == '.'
}

func TestRotation(t *testing.T) {
	oldKey, newKeyPEM := newKey(t), newKey(t)
	before := keysFrom(t, oldKey)
	oldReceipt, err := before.SignReceipt(claims())
	if err != nil {
		t.Fatal(err)
	}
	after := keysFrom(t, newKeyPEM, oldKey) // newest first
	if len(after.JWKS().Keys) != 2 {
		t.Fatalf("published %d keys, want 2", len(after.JWKS().Keys))
	}
	if _, err := Verify(oldReceipt, after.JWKS()); err != nil {
		t.Fatalf("old receipt after rotation: %v", err)
	}
	newReceipt, _ := after.SignReceipt(claims())
	if kid := headerKID(t, newReceipt); kid != after.JWKS().Keys[0].KeyID {
		t.Fatalf("signed with %s, want the newest key %s", kid, after.JWKS().Keys[0].KeyID)
	}
	if _, err := Verify(newReceipt, before.JWKS()); err == nil {
		t.Fatal("a receipt of an unpublished key verified")
	}
}

func headerKID(t *testing.T, token string) string {
	t.Helper()
	jws, err := jose.ParseSignedCompact(token, Algorithms)
	if err != nil {
		t.Fatal(err)
	}
	return jws.Signatures[0].Protected.KeyID
}

func TestEd25519AndForeignKeys(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := KeySigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := k.SignReceipt(claims())
	if _, err := Verify(token, k.JWKS()); err != nil {
		t.Fatalf("EdDSA receipt: %v", err)
	}
	data, _ := json.Marshal(k.JWKS())
	if !strings.Contains(string(data), `"alg":"EdDSA"`) || strings.Contains(string(data), `"d"`) {
		t.Fatalf("JWKS = %s", data)
	}
	if _, err := ParsePrivateKeyPEM([]byte("-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----\n")); err == nil {
		t.Fatal("a public key was accepted as a signing key")
	}
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

// kmsSigner stands for a key in a KMS or an HSM: billingd sees only its
// public key and asks it to sign; it counts the requests.
type kmsSigner struct {
	key   jose.OpaqueSigner
	kid   string
	calls int
}

func (k *kmsSigner) Public() *jose.JSONWebKey {
	p := k.key.Public()
	p.KeyID = k.kid
	return p
}
func (k *kmsSigner) Algs() []jose.SignatureAlgorithm { return k.key.Algs() }
func (k *kmsSigner) SignPayload(payload []byte, alg jose.SignatureAlgorithm) ([]byte, error) {
	k.calls++
	return k.key.SignPayload(payload, alg)
}

// TestOpaqueSigner: a Signer that only signs (a KMS or an HSM) signs
// receipts and checkpoints under its own key id, and the two kinds cannot
// be passed off as each other.
func TestOpaqueSigner(t *testing.T) {
	priv, err := ParsePrivateKeyPEM(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := KeySigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	kms := &kmsSigner{key: inner, kid: "projects/p/keys/receipts/1"}
	k, err := NewKeys(kms)
	if err != nil {
		t.Fatal(err)
	}
	rcpt, _ := k.SignReceipt(claims())
	cp, err := k.SignCheckpoint(billing.Checkpoint{Org: "acme", Seq: 3, Hash: "h", IssuedAt: 1})
	if err != nil || kms.calls != 2 || headerKID(t, rcpt) != kms.kid {
		t.Fatalf("calls %d, kid %s, err %v", kms.calls, headerKID(t, rcpt), err)
	}
	if got, err := VerifyCheckpoint(cp, k.JWKS()); err != nil || got.Seq != 3 || got.Org != "acme" {
		t.Fatalf("VerifyCheckpoint = %+v, %v", got, err)
	}
	if _, err := Verify(cp, k.JWKS()); err == nil {
		t.Fatal("a checkpoint verified as a receipt")
	}
	if _, err := VerifyCheckpoint(rcpt, k.JWKS()); err == nil {
		t.Fatal("a receipt verified as a checkpoint")
	}
}

// memoryStore is a PublicKeyStore in memory, with one private key stored
// by an older billingd.
type memoryStore struct {
	public  map[string][]byte
	private [][]byte
}

func (m *memoryStore) RegisterReceiptKey(_ context.Context, kid string, jwk []byte) error {
	m.public[kid] = jwk
	return nil
}

func (m *memoryStore) ReceiptPublicKeys(context.Context) ([][]byte, error) {
	var out [][]byte
	for _, v := range m.public {
		out = append(out, v)
	}
	return out, nil
}

func (m *memoryStore) RetireStoredPrivateKeys(_ context.Context, toPublic func([]byte) (string, []byte, error)) error {
	for _, p := range m.private {
		kid, jwk, err := toPublic(p)
		if err != nil {
			return err
		}
		m.public[kid] = jwk
	}
	m.private = nil
	return nil
}

// TestGeneratedKeys: without key files each process signs with a key of
// its own and stores only its public half; every process publishes every
// registered key, and a key an older billingd stored is retired to its
// public half, so its receipts still verify.
func TestGeneratedKeys(t *testing.T) {
	oldPEM := newKey(t)
	oldPriv, _ := ParsePrivateKeyPEM(oldPEM)
	oldSigner, _ := KeySigner(oldPriv)
	oldKeys, _ := NewKeys(oldSigner)
	oldReceipt, _ := oldKeys.SignReceipt(claims())

	store := &memoryStore{public: map[string][]byte{}, private: [][]byte{oldPEM}}
	a, err := Load(context.Background(), nil, store)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Load(context.Background(), nil, store)
	if len(store.private) != 0 || len(store.public) != 3 {
		t.Fatalf("stored: %d private, %d public keys", len(store.private), len(store.public))
	}
	for _, jwk := range store.public {
		if strings.Contains(string(jwk), `"d"`) {
			t.Fatalf("a private key was stored: %s", jwk)
		}
	}
	published, err := b.Published(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fromA, _ := a.SignReceipt(claims())
	for _, r := range []string{fromA, oldReceipt} {
		if _, err := Verify(r, published); err != nil {
			t.Fatalf("another process's receipt: %v", err)
		}
	}
	// With key files, only the files' keys are published: a key someone
	// registered in the database signs nothing that verifies.
	files := keysFrom(t, newKey(t))
	if _, err := Verify(fromA, files.JWKS()); err == nil {
		t.Fatal("a registered key verified against the key files' set")
	}
}

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
	return k
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
	k, err := NewKeys(priv)
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

type memoryStore struct{ stored []byte }

func (m *memoryStore) SharedReceiptKey(_ context.Context, candidate []byte) ([]byte, error) {
	if m.stored == nil {
		m.stored = candidate
	}
	return m.stored, nil
}

func TestSharedKey(t *testing.T) {
	store := &memoryStore{}
	a, err := Load(context.Background(), nil, store)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Load(context.Background(), nil, store)
	if a.JWKS().Keys[0].KeyID != b.JWKS().Keys[0].KeyID {
		t.Fatal("two loads of the shared key differ")
	}
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

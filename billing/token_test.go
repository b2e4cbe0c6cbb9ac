package billing

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestNewToken(t *testing.T) {
	const draws = 10_000
	tokens := make(map[string]bool, draws)
	hashes := make(map[string]bool, draws)
	for range draws {
		token, hash := newToken()
		body, ok := strings.CutPrefix(token, TokenPrefix)
		if !ok {
			t.Fatalf("token %q lacks the prefix %q", token, TokenPrefix)
		}
		if len(token) > MaxTokenLength {
			t.Fatalf("token %q is %d characters, want at most %d", token, len(token), MaxTokenLength)
		}
		raw, err := base64.RawURLEncoding.DecodeString(body)
		if err != nil {
			t.Fatalf("token body %q is not unpadded URL-safe base64: %v", body, err)
		}
		if len(raw) < 16 {
			t.Fatalf("token carries %d bytes, want at least 16 (128 bits)", len(raw))
		}
		if url.QueryEscape(token) != token || url.PathEscape(token) != token {
			t.Fatalf("token %q is not URL-safe", token)
		}
		if !wellFormedToken(token) {
			t.Fatalf("newToken %q is not wellFormedToken", token)
		}
		if want := sha256.Sum256([]byte(token)); !bytes.Equal(hash, want[:]) {
			t.Fatalf("hash of %q is %x, want its SHA-256 %x", token, hash, want)
		}
		if !bytes.Equal(hashToken(token), hash) {
			t.Fatal("hashToken disagrees with newToken's hash")
		}
		if tokens[token] || hashes[string(hash)] {
			t.Fatalf("token or hash repeated after %d draws", len(tokens))
		}
		tokens[token], hashes[string(hash)] = true, true
	}
}

func TestHashToken(t *testing.T) {
	a, b := hashToken("pbc_a"), hashToken("pbc_b")
	if len(a) != sha256.Size {
		t.Errorf("hash is %d bytes, want %d", len(a), sha256.Size)
	}
	if bytes.Equal(a, b) {
		t.Error("different tokens, same hash")
	}
	if !bytes.Equal(a, hashToken("pbc_a")) {
		t.Error("hashToken is not deterministic")
	}
}

func TestWellFormedToken(t *testing.T) {
	body43 := strings.Repeat("A", 43) // a newToken body: 32 bytes in base64
	issued, _ := newToken()
	tests := []struct {
		name  string
		in    string
		valid bool
	}{
		{"empty", "", false},
		{"prefix only", "pbc_", false},
		{"no prefix", body43, false},
		{"wrong prefix", "pbx_" + body43, false},
		{"upper-case prefix", "PBC_" + body43, false},
		{"confirmation id prefix", "cfm_" + body43, false},
		{"prefix twice", "pbc_pbc_" + body43, true},
		{"leading space", " pbc_" + body43, false},
		{"trailing space", "pbc_" + body43 + " ", false},
		{"trailing newline", "pbc_" + body43 + "\n", false},
		{"21-char body", "pbc_" + strings.Repeat("a", 21), false},
		{"22-char body (128 bits)", "pbc_" + strings.Repeat("a", 22), true},
		{"80 chars", "pbc_" + strings.Repeat("a", 76), true},
		{"81 chars", "pbc_" + strings.Repeat("a", 77), false},
		{"1000 chars", "pbc_" + strings.Repeat("a", 996), false},
		{"plus and slash", "pbc_" + body43[:41] + "+/", false},
		{"padding", "pbc_" + body43 + "=", false},
		{"dot", "pbc_" + body43[:42] + ".", false},
		{"percent-encoded", "pbc_" + body43[:40] + "%2F", false},
		{"inner space", "pbc_" + body43[:20] + " " + body43[:20], false},
		{"NUL", "pbc_" + body43 + "\x00", false},
		{"unicode letter", "pbc_" + body43[:42] + "é", false},
		{"fullwidth letter", "pbc_" + body43[:42] + "Ａ", false},
		{"invalid UTF-8", "pbc_" + body43[:42] + "\xff", false},
		{"url-safe alphabet", "pbc_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", true},
		{"valid", "pbc_" + body43, true},
		{"issued", issued, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wellFormedToken(tt.in); got != tt.valid {
				t.Errorf("wellFormedToken(%q) = %v, want %v", tt.in, got, tt.valid)
			}
		})
	}
}

func TestNewConfirmationID(t *testing.T) {
	seen := map[string]bool{}
	for range 10_000 {
		id := newConfirmationID()
		if !WellFormedConfirmationID(id) {
			t.Fatalf("newConfirmationID %q is not well formed", id)
		}
		if raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(id, "cfm_")); err != nil || len(raw) != 16 {
			t.Fatalf("id %q: %d bytes, %v; want 16", id, len(raw), err)
		}
		if seen[id] {
			t.Fatalf("id %q repeated", id)
		}
		seen[id] = true
	}
}

func TestWellFormedConfirmationID(t *testing.T) {
	body22 := strings.Repeat("A", 22) // 16 bytes in base64
	tests := []struct {
		name  string
		in    string
		valid bool
	}{
		{"empty", "", false},
		{"prefix only", "cfm_", false},
		{"no prefix", body22, false},
		{"wrong prefix", "cfx_" + body22, false},
		{"token prefix", "pbc_" + body22, false},
		{"upper-case prefix", "CFM_" + body22, false},
		{"21-char body", "cfm_" + body22[:21], false},
		{"23-char body", "cfm_" + body22 + "A", false},
		{"long", "cfm_" + strings.Repeat("A", 200), false},
		{"slash", "cfm_" + body22[:21] + "/", false},
		{"path traversal", "cfm_../../../etc/passwd", false},
		{"plus", "cfm_" + body22[:21] + "+", false},
		{"dot", "cfm_" + body22[:21] + ".", false},
		{"space", "cfm_" + body22[:21] + " ", false},
		{"quote", "cfm_" + body22[:21] + "'", false},
		{"unicode", "cfm_" + body22[:20] + "é", false},
		{"trailing newline", "cfm_" + body22 + "\n", false},
		{"valid", "cfm_" + body22, true},
		{"valid with - and _", "cfm_abc-DEF_0123456789wxyz", true},
		{"issued", newConfirmationID(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WellFormedConfirmationID(tt.in); got != tt.valid {
				t.Errorf("WellFormedConfirmationID(%q) = %v, want %v", tt.in, got, tt.valid)
			}
		})
	}
}

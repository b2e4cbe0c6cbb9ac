package billing

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

const (
	// TokenPrefix starts every confirmation token.
	TokenPrefix = "pbc_"
	// MaxTokenLength is the longest token the contract allows.
	MaxTokenLength = 80

	tokenBytes          = 32 // 256 bits from the CSPRNG (contract: at least 128)
	confirmationIDBytes = 16
	confirmationPrefix  = "cfm_"
)

// newToken returns a fresh confirmation token and the hash that is stored in
// its place. The token itself is never stored or logged.
func newToken() (token string, hash []byte) {
	token = TokenPrefix + randomString(tokenBytes)
	return token, hashToken(token)
}

// hashToken is what a token is looked up by. A plain SHA-256 is enough: the
// token has 256 bits of entropy, so there is nothing to brute-force, and
// looking up by hash means the database compares hashes, never secrets, so
// timing reveals nothing about stored tokens.
func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// lookupKey is what a second call's token is looked up by: the hash of a
// string of a token's shape, nil (which no confirmation has) for anything
// else, which is then answered like any unknown token.
func lookupKey(token string) []byte {
	if !wellFormedToken(token) {
		return nil
	}
	return hashToken(token)
}

// wellFormedToken reports whether s has the shape of a token billingd issues:
// the prefix and URL-safe base64, at most MaxTokenLength long.
func wellFormedToken(s string) bool {
	body, ok := strings.CutPrefix(s, TokenPrefix)
	return ok && len(s) <= MaxTokenLength && len(body) >= 22 && isURLSafe(body)
}

// newConfirmationID returns a public, unguessable confirmation id.
func newConfirmationID() string {
	return confirmationPrefix + randomString(confirmationIDBytes)
}

// WellFormedConfirmationID reports whether s can be a confirmation id, so
// that junk from a path never reaches the database. The transports ask it
// too, before they look anything up for a page.
func WellFormedConfirmationID(s string) bool {
	body, ok := strings.CutPrefix(s, confirmationPrefix)
	return ok && len(body) == base64.RawURLEncoding.EncodedLen(confirmationIDBytes) && isURLSafe(body)
}

func randomString(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the
	// program rather than hand out predictable bytes.
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func isURLSafe(s string) bool {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			return false
		}
	}
	return true
}

package billing

import (
	"strings"
	"testing"
)

// FuzzWellFormedToken: the token parser never panics, and accepts only
// prefixed, URL-safe tokens of at most MaxTokenLength characters.
func FuzzWellFormedToken(f *testing.F) {
	tok, _ := newToken()
	for _, seed := range []string{tok, "", "pbc_", "pbc_" + strings.Repeat("A", 77), "pbx_abc", "pbc_ä", "pbc_a b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !wellFormedToken(s) {
			return
		}
		if !strings.HasPrefix(s, TokenPrefix) || len(s) > MaxTokenLength || !isURLSafe(s[len(TokenPrefix):]) {
			t.Fatalf("accepted %q", s)
		}
	})
}

// FuzzRequestValidation: the parameter checks never panic, let through only
// lower-case plan ids of at most 64 characters, and refuse with
// invalid_request.
func FuzzRequestValidation(f *testing.F) {
	for _, seed := range []string{"scale", "", "../x", "SCALE", "a-b_c", strings.Repeat("a", 65), "sc\u200bale"} {
		f.Add(seed, "upgrade_plan")
	}
	f.Fuzz(func(t *testing.T, to, op string) {
		err := validateRequest(ChangeRequest{Operation: Operation(op), To: to})
		if err == nil && (!planIDPattern.MatchString(to) || len(to) > 64 || strings.ToLower(to) != to) {
			t.Fatalf("accepted plan id %q", to)
		}
		if err != nil && ErrorCode(err) != CodeInvalidRequest {
			t.Fatalf("refused with %s", ErrorCode(err))
		}
	})
}

package httpedge

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzBearerToken: the Authorization header parser never panics and never
// returns a token with surrounding space or an empty one.
func FuzzBearerToken(f *testing.F) {
	for _, seed := range []string{"Bearer abc", "bearer abc", "Basic abc", "Bearer ", "Bearer  x ", "", "Bearerabc"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		req, _ := http.NewRequest("GET", "/", nil)
		req.Header.Set("Authorization", header)
		tok, ok := BearerToken(req)
		if ok && (tok == "" || strings.TrimSpace(tok) != tok) {
			t.Fatalf("BearerToken(%q) = %q", header, tok)
		}
	})
}

package auth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/billingd/billingd/internal/auth"
)

// FuzzVerify: any string presented as a bearer token is either a valid token
// or refused with ErrInvalidToken; verification never panics.
func FuzzVerify(f *testing.F) {
	iss := startIssuer(f, "ES256", "")
	v := newVerifier(f, config(iss))
	good, err := iss.Mint(validClaims())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{good, "", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", good + "x", good[:len(good)/2]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if _, err := v.Verify(context.Background(), raw); err != nil && !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("error %v does not wrap ErrInvalidToken", err)
		}
	})
}

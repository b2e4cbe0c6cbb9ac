package auth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// lookAlikes are identities that a person reading "Requested by" could
// take for someone else's, by Unicode's identifier rules (UTS #39).
var lookAlikes = map[string]string{
	"Cyrillic а in a Latin name":        "demo-\u0430dmin",
	"Cyrillic е and о":                  "d\u0435m\u043e-admin",
	"Greek ο in a Latin name":           "dem\u03bf-admin",
	"whole-script Cyrillic look-alike":  "\u0441\u043e\u0441\u043e", // "сосо" for "coco"
	"dotless ı":                         "adm\u0131n",
	"decomposed mark (not NFC)":         "jose\u0301",
	"fullwidth letters":                 "\uff41\uff44\uff4d\uff49\uff4e",
	"ligature ﬁ":                        "pro\ufb01le",
	"ellipsis for three dots":           "auth0|5f3c\u2026",
	"mathematical bold":                 "\U0001d41a\U0001d41d\U0001d426\U0001d422\U0001d427",
	"Latin with Cyrillic and Greek":     "a\u0431\u03b3",
	"Armenian օ in a Latin name":        "dem\u0585-admin",
	"Cherokee look-alike of ASCII name": "\u13a0\u13ac\u13b7", // ᎠᎬᎷ
}

// TestLookAlikeIdentifiers: SafeIdentifier refuses look-alikes and keeps
// names people really have, in one script or in the combinations UTS #39's
// Highly Restrictive level allows.
func TestLookAlikeIdentifiers(t *testing.T) {
	for name, s := range lookAlikes {
		if auth.SafeIdentifier(s) {
			t.Errorf("%s: %q accepted", name, s)
		}
	}
	for _, fine := range []string{"demo-admin", "Zoë Ñúñez", "José", "用户-42", "山田太郎", "やまだ-taro", "田中タロウ",
		"김민준", "Сергей", "Ωμέγα-7", "محمد", "user@example.com", "auth0|5f3c9a", "a b", "Łukasz Żółć", "demo—admin"} {
		if !auth.SafeIdentifier(fine) {
			t.Errorf("%q refused", fine)
		}
	}
}

// TestLookAlikeIdentityClaims: a token whose sub, org or client is a
// look-alike is refused like an invalid token (401), as an invisible
// character is.
func TestLookAlikeIdentityClaims(t *testing.T) {
	iss := startIssuer(t, devissuer.AlgES256, "")
	v := newVerifier(t, config(iss))
	for name, value := range lookAlikes {
		for _, claim := range []string{"sub", "org_id", "azp", "client_id"} {
			c := validClaims()
			c.Extra = map[string]any{claim: value}
			if _, err := v.Verify(context.Background(), mint(t, iss, c)); !errors.Is(err, auth.ErrInvalidToken) {
				t.Errorf("%s: %s %q accepted: %v", name, claim, value, err)
			}
		}
	}
}

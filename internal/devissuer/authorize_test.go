package devissuer

import (
	"slices"
	"testing"
)

// TestGrantedScopes: like a real provider's consent, the dev issuer grants
// the requested scopes the user has, never one nobody asked for (issue 22:
// it used to grant every scope of the user, which hid that billingd asked
// for none).
func TestGrantedScopes(t *testing.T) {
	has := []string{"billing:read", "billing:write", "billing:admin"}
	for requested, want := range map[string][]string{
		"openid profile":                             nil,
		"openid billing:read":                        {"billing:read"},
		"openid billing:read billing:read billing:x": {"billing:read"},
		"billing:admin billing:write":                {"billing:admin", "billing:write"},
	} {
		if got := granted(has, requested); !slices.Equal(got, want) {
			t.Errorf("requested %q: granted %q, want %q", requested, got, want)
		}
	}
	if got := granted([]string{"billing:read"}, "openid billing:read billing:admin"); !slices.Equal(got, []string{"billing:read"}) {
		t.Errorf("granted a scope the user does not have: %q", got)
	}
}

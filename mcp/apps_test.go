package mcp

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
)

// TestSupportsApps: only a client that advertised the extension with HTML
// views loses the token from what the model reads.
func TestSupportsApps(t *testing.T) {
	for name, tc := range map[string]struct {
		caps *sdk.ClientCapabilities
		want bool
	}{
		"no capabilities":   {nil, false},
		"no extensions":     {&sdk.ClientCapabilities{}, false},
		"other extension":   {&sdk.ClientCapabilities{Extensions: map[string]any{"io.example/x": map[string]any{}}}, false},
		"no mime types":     {&sdk.ClientCapabilities{Extensions: map[string]any{appsExtension: map[string]any{}}}, false},
		"other mime type":   {&sdk.ClientCapabilities{Extensions: map[string]any{appsExtension: map[string]any{"mimeTypes": []any{"text/html"}}}}, false},
		"settings not map":  {&sdk.ClientCapabilities{Extensions: map[string]any{appsExtension: true}}, false},
		"html views":        {&sdk.ClientCapabilities{Extensions: map[string]any{appsExtension: map[string]any{"mimeTypes": []any{viewMIMEType}}}}, true},
		"among other types": {&sdk.ClientCapabilities{Extensions: map[string]any{appsExtension: map[string]any{"mimeTypes": []any{"x/y", viewMIMEType}}}}, true},
	} {
		if got := supportsApps(tc.caps); got != tc.want {
			t.Errorf("%s: supportsApps = %v, want %v", name, got, tc.want)
		}
	}
}

// TestForView: the token moves to _meta; everything else stays.
func TestForView(t *testing.T) {
	res := billing.ChangeResult{ConfirmToken: "pbc_secret", ConfirmationID: "cfm_x", Summary: "Upgrade.", Operation: billing.OpUpgrade}
	r := forView(res)
	if r.out.ConfirmToken != "" || r.out.ConfirmationID != "cfm_x" || r.out.Summary != "Upgrade." {
		t.Fatalf("out %+v", r.out)
	}
	if r.meta[tokenMetaKey] != "pbc_secret" || strings.Contains(r.text, "pbc_") || !strings.HasPrefix(r.text, "Upgrade.") {
		t.Fatalf("meta %v, text %q", r.meta, r.text)
	}
}

func TestSessionIDs(t *testing.T) {
	if sessionIDs("") != nil {
		t.Fatal("without a replica id the SDK's default must be used")
	}
	next := sessionIDs("billingd-1")
	a, b := next(), next()
	if !strings.HasPrefix(a, "billingd-1.") || a == b || len(a) < len("billingd-1.")+20 {
		t.Fatalf("session ids %q, %q", a, b)
	}
}

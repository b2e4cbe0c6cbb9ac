package rest

import (
	"net/url"
	"strings"
	"testing"

	"github.com/billingd/billingd/internal/websession"
)

// browserResolve reads a Location value roughly as a WHATWG URL parser
// does for an http(s) base, for the test's second opinion: strip leading
// and trailing C0 controls and spaces, remove ASCII tab and newline
// anywhere, read backslashes as slashes, then resolve against base.
func browserResolve(t *testing.T, base *url.URL, location string) *url.URL {
	t.Helper()
	s := strings.TrimFunc(location, func(r rune) bool { return r <= ' ' })
	s = strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(s)
	ref, err := url.Parse(s)
	if err != nil {
		return nil
	}
	return base.ResolveReference(ref)
}

// TestSafeReturnPath: a return address is kept only if every browser
// resolves it to a path on billingd's own origin. The tricky forms are
// those browsers rewrite before parsing (WHATWG URL: tab and newline
// removed anywhere, C0 controls and spaces trimmed, backslash read as a
// slash), plus schemes, userinfo, encodings and an over-long path.
func TestSafeReturnPath(t *testing.T) {
	base, _ := url.Parse("https://billing.example/")
	for _, tc := range []struct {
		in, want string
	}{
		{"/", "/"},
		{"/approvals/cfm_0123456789abcdef", "/approvals/cfm_0123456789abcdef"},
		{"/verify/cfm_abc?x=1#frag", "/verify/cfm_abc?x=1#frag"},
		{"/%2F%2Fevil.example", "/%2F%2Fevil.example"}, // an encoded slash stays in the path
		{"/a/../b", "/a/../b"},
		{"/%E2%82%AC", "/%E2%82%AC"},
		// Refused: each is another origin in some browser, or not a path.
		{"", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{"/\t/evil.example/phish", "/"}, // the reported one: /%09/evil.example
		{"/\n/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\r\n/evil.example", "/"},
		{"\t//evil.example", "/"},
		{" //evil.example", "/"},
		{"/\t\t/evil.example", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/\\/evil.example", "/"},
		{"\\/evil.example", "/"},
		{"/\x00/evil.example", "/"},
		{"/\x0b/evil.example", "/"},
		{"/\x0c/evil.example", "/"},
		{"/\x1f/evil.example", "/"},
		{"/\x7f/evil.example", "/"},
		{"/\u0085/evil.example", "/"}, // C1 NEL
		{"/\u2028/evil.example", "/"},
		{"/\ufeff/evil.example", "/"},
		{"/\uff0f/evil.example", "/"}, // fullwidth solidus
		{"/ /evil.example", "/"},
		{"https://evil.example/", "/"},
		{"http:/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"evil.example", "/"},
		{"/" + strings.Repeat("a", websession.MaxReturnTo), "/"},
		{"/\xff", "/"},
	} {
		got := safeReturnPath(tc.in)
		if got != tc.want {
			t.Errorf("safeReturnPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if to := browserResolve(t, base, got); to == nil || to.Host != base.Host || to.Scheme != base.Scheme {
			t.Errorf("safeReturnPath(%q) = %q, which a browser reads as %v", tc.in, got, to)
		}
	}
	// The second opinion agrees that the refused ones leave the origin.
	for _, evil := range []string{"/\t/evil.example", "/\\evil.example", "\t//evil.example", "/\r\n/evil.example"} {
		if to := browserResolve(t, base, evil); to == nil || to.Host == base.Host {
			t.Errorf("the test's browser model keeps %q on billingd (%v): the table proves nothing", evil, to)
		}
	}
}

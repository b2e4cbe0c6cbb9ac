package rest

import (
	"io/fs"
	"strings"
	"testing"
)

// TestDashboardScriptWritesNoHTML: the script never hands server data to an
// HTML parser; it builds elements and sets textContent. (The CSP forbids
// inline script, so an injected <script> would not run anyway, but markup
// could still deface the confirmation dialog.)
func TestDashboardScriptWritesNoHTML(t *testing.T) {
	script, err := fs.ReadFile(webFiles, "web/dashboard.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "setInterval(\""} {
		if strings.Contains(string(script), sink) {
			t.Errorf("dashboard.js uses %s", sink)
		}
	}
}

package rest

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestDashboardScriptWritesNoHTML: the scripts never hand server data (or
// the address) to an HTML parser; they build elements and set textContent.
// (The CSP forbids inline script, so an injected <script> would not run
// anyway, but markup could still deface the confirmation dialog or the
// approval page.)
func TestDashboardScriptWritesNoHTML(t *testing.T) {
	scripts, err := fs.Glob(webFiles, "web/*.js")
	if err != nil || len(scripts) < 3 {
		t.Fatalf("scripts %v: %v", scripts, err)
	}
	for _, name := range scripts {
		script, err := fs.ReadFile(webFiles, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "setInterval(\""} {
			if strings.Contains(string(script), sink) {
				t.Errorf("%s uses %s", path.Base(name), sink)
			}
		}
	}
}

// TestDashboardServesEveryScript: each script in web/ is served as an
// asset; one that is not would fail to load and break its page.
func TestDashboardServesEveryScript(t *testing.T) {
	scripts, _ := fs.Glob(webFiles, "web/*.js")
	for _, name := range scripts {
		if !slices.Contains(dashboardAssets, path.Base(name)) {
			t.Errorf("%s is not in dashboardAssets", name)
		}
	}
}

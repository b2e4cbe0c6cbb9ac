package appview

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestViewMatchesPinnedSource: the committed view.html is exactly what
// view.src.html and the SDK version pinned in package-lock.json build (make
// view). It needs the pinned SDK installed (make test runs npm ci); without
// it the test skips, and fails under CI=true.
func TestViewMatchesPinnedSource(t *testing.T) {
	bundle, err := os.ReadFile(BundlePath)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the pinned MCP Apps SDK is not installed (npm ci --prefix mcp/appview): %v", err)
		}
		t.Skipf("the pinned MCP Apps SDK is not installed (make test installs it): %v", err)
	}
	installed := readVersion(t, PackagePath)
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	readJSON(t, "package-lock.json", &lock)
	pinned := lock.Packages["node_modules/@modelcontextprotocol/ext-apps"].Version
	if pinned == "" || installed != pinned {
		t.Fatalf("installed ext-apps %q, package-lock.json pins %q: run make view", installed, pinned)
	}
	source, err := os.ReadFile(SourcePath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Build(string(source), string(bundle), installed)
	if err != nil {
		t.Fatal(err)
	}
	if HTML != want {
		t.Fatalf("view.html is not the build of view.src.html with ext-apps %s: run make view and commit view.html", pinned)
	}
}

// TestViewIsSelfContained: the view loads nothing: no src or href to
// anything but an in-page anchor.
func TestViewIsSelfContained(t *testing.T) {
	for _, bad := range []string{`src="`, `<link `, `@import`, `http-equiv`} {
		if strings.Contains(HTML, bad) {
			t.Errorf("view.html contains %q: the view must not load anything", bad)
		}
	}
	if !strings.Contains(HTML, "const App = ") || strings.Contains(HTML, placeholder) {
		t.Error("view.html does not inline the MCP Apps SDK")
	}
}

func TestBuildRefusesWhatWouldBreakTheScript(t *testing.T) {
	for name, bundle := range map[string]string{
		"script end": `var a="</script>";export{a as App};`,
		"no export":  `var a=1;`,
		"no App":     `var a=1;export{a as Other};`,
	} {
		if _, err := Build(placeholder, bundle, "x"); err == nil {
			t.Errorf("%s: built", name)
		}
	}
	got, err := Build("<script>"+placeholder+"</script>", "var q=1;export{q as App,r as B};", "9")
	if err != nil || !strings.Contains(got, "var q=1;const App = q;") {
		t.Fatalf("Build = %q, %v", got, err)
	}
}

func readVersion(t *testing.T, path string) string {
	t.Helper()
	var meta struct{ Version string }
	readJSON(t, path, &meta)
	return meta.Version
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Command build writes mcp/appview/view.html from view.src.html and the
// pinned MCP Apps SDK in mcp/appview/node_modules (npm ci first; `make view`
// does both). It also copies the SDK's licence next to the view.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/billingd/billingd/mcp/appview"
)

func main() {
	dir := "mcp/appview"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := run(dir); err != nil {
		fmt.Fprintln(os.Stderr, "build view:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	read := func(p string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, p))
		return string(b), err
	}
	source, err := read(appview.SourcePath)
	if err != nil {
		return err
	}
	bundle, err := read(appview.BundlePath)
	if err != nil {
		return fmt.Errorf("%w (run npm ci --prefix %s)", err, dir)
	}
	pkg, err := read(appview.PackagePath)
	if err != nil {
		return err
	}
	var meta struct{ Version string }
	if err := json.Unmarshal([]byte(pkg), &meta); err != nil {
		return err
	}
	html, err := appview.Build(source, bundle, meta.Version)
	if err != nil {
		return err
	}
	license, err := read(appview.LicensePath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ext-apps.LICENSE"), []byte(license), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, appview.OutputPath), []byte(html), 0o644)
}

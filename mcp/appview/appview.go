// Package appview is billingd's MCP Apps view (contract §7.1): one
// self-contained HTML page that shows a plan-change proposal inside the chat
// host and makes the second call only when the person presses Confirm.
//
// view.src.html is the source. The view speaks to its host through the
// official MCP Apps SDK (npm @modelcontextprotocol/ext-apps, App class),
// never a bridge of billingd's own: Build inlines the SDK's self-contained
// view build (dist/src/app-with-deps.js, pinned by package-lock.json) into the
// source, and `make view` (go run ./mcp/appview/build) writes the result to
// view.html, which is committed and embedded in the binary. The view needs
// no network access at all, so its resource declares an empty CSP allow-list.
// TestViewMatchesPinnedSource checks that view.html is exactly what the
// source and the pinned SDK build.
package appview

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// HTML is the built view.
//
//go:embed view.html
var HTML string

// Paths of the inputs, relative to this directory.
const (
	SourcePath  = "view.src.html"
	BundlePath  = "node_modules/@modelcontextprotocol/ext-apps/dist/src/app-with-deps.js"
	PackagePath = "node_modules/@modelcontextprotocol/ext-apps/package.json"
	LicensePath = "node_modules/@modelcontextprotocol/ext-apps/LICENSE"
	OutputPath  = "view.html"
)

const placeholder = "/* EXT_APPS_BUNDLE */"

// exportClause is the bundle's last statement: `export{a as B,…};`.
var exportClause = regexp.MustCompile(`export\{([^{}]*)\};?\s*$`)

// Build inlines bundle, the SDK's ESM view build, into the view source. An
// inline module script cannot be imported from, so the bundle's export
// statement becomes a local binding of the one class the view uses, App.
func Build(source, bundle, version string) (string, error) {
	if strings.Count(source, placeholder) != 1 {
		return "", errors.New("appview: the source must hold the bundle placeholder exactly once")
	}
	if strings.Contains(strings.ToLower(bundle), "</script") || strings.Contains(bundle, "<!--") {
		return "", errors.New("appview: the bundle contains text that would end the inline script")
	}
	m := exportClause.FindStringSubmatchIndex(bundle)
	if m == nil {
		return "", errors.New("appview: no export clause at the end of the bundle")
	}
	local := ""
	for _, item := range strings.Split(bundle[m[2]:m[3]], ",") {
		if name, exported, ok := strings.Cut(strings.TrimSpace(item), " as "); ok && exported == "App" {
			local = name
		}
	}
	if local == "" {
		return "", errors.New("appview: the bundle does not export App")
	}
	inlined := fmt.Sprintf("/* @modelcontextprotocol/ext-apps %s, dist/src/app-with-deps.js (MIT / Apache-2.0: see ext-apps.LICENSE) */\n%sconst App = %s;\n",
		version, bundle[:m[0]], local)
	return strings.Replace(source, placeholder, inlined, 1), nil
}

package rest

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"slices"

	"github.com/labstack/echo/v4"
)

// The dashboard is one server-rendered page and two static files. Its script
// signs in with a pasted access token and uses only the public REST API, so
// it is held to exactly the rules every other client is.
//
//go:embed web
var webFiles embed.FS

var dashboardPage = template.Must(template.ParseFS(webFiles, "web/dashboard.html"))

// dashboardCSP allows the page's own script, style and API calls and nothing
// else: no inline script, no other origin, no framing, and no form
// submission, so a token typed into the sign-in form can never end up in a
// URL even if the script failed to load.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboardAssets are the files served under /assets/, by name.
var dashboardAssets = []string{"dashboard.js", "dashboard.css"}

func mountDashboard(e *echo.Echo) {
	version := assetVersion()
	// Per-route middleware, not a Group: an Echo group with middleware also
	// claims every unmatched path under its prefix, here all of them.
	e.GET("/", func(c echo.Context) error { return renderDashboard(c, version) }, dashboardHeaders)
	e.GET("/assets/:name", serveAsset, dashboardHeaders)
}

// dashboardHeaders sets the browser security headers of the dashboard's
// responses.
func dashboardHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", dashboardCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		return next(c)
	}
}

func renderDashboard(c echo.Context, version string) error {
	var page bytes.Buffer
	if err := dashboardPage.Execute(&page, struct{ AssetVersion string }{version}); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, page.Bytes())
}

func serveAsset(c echo.Context) error {
	name := c.Param("name")
	if !slices.Contains(dashboardAssets, name) {
		return echo.ErrNotFound
	}
	data, err := fs.ReadFile(webFiles, "web/"+name)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, mime.TypeByExtension(path.Ext(name)), data)
}

// assetVersion is a digest of the assets; the page links them with it so
// that a browser never combines a new page with an old cached script.
func assetVersion() string {
	sum := sha256.New()
	for _, name := range dashboardAssets {
		data, _ := fs.ReadFile(webFiles, "web/"+name)
		sum.Write(data)
	}
	return hex.EncodeToString(sum.Sum(nil))[:12]
}

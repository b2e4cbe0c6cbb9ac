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

// The dashboard is two server-rendered pages (the dashboard and the approval
// page) and their static files. Their scripts sign in with a pasted access
// token and use only the public REST API, so they are held to exactly the
// rules every other client is.
//
//go:embed web
var webFiles embed.FS

var (
	dashboardPage = template.Must(template.ParseFS(webFiles, "web/dashboard.html"))
	// approvalPage is the page billingd's approval_url points to. It never
	// contains the confirmation id: the script reads it from the address,
	// checks its shape and looks it up through the API, so nothing from the
	// path is ever rendered by the server.
	approvalPage = template.Must(template.ParseFS(webFiles, "web/approval.html"))
)

// dashboardCSP allows the page's own script, style and API calls and nothing
// else: no inline script, no other origin, no framing, and no form
// submission, so a token typed into the sign-in form can never end up in a
// URL even if the script failed to load.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboardAssets are the files served under /assets/, by name. common.js
// holds what both pages' scripts share (API calls, sign-in, countdowns).
var dashboardAssets = []string{"common.js", "receipt.js", "dashboard.js", "approval.js", "dashboard.css"}

func mountDashboard(e *echo.Echo, s *server) {
	version := assetVersion()
	data := pageData{AssetVersion: version, TokenPaste: s.TokenPaste, SignIn: s.SignIn != nil}
	// Per-route middleware, not a Group: an Echo group with middleware also
	// claims every unmatched path under its prefix, here all of them.
	e.GET("/", renderPage(dashboardPage, data), dashboardHeaders)
	e.GET("/approvals/:id", renderPage(approvalPage, data), dashboardHeaders)
	e.GET("/assets/:name", serveAsset, dashboardHeaders)
}

// dashboardHeaders sets the browser security headers of the dashboard's
// responses.
func dashboardHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		setPageHeaders(h, dashboardCSP, "no-cache")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		return next(c)
	}
}

// setPageHeaders sets what every HTML page billingd serves sends: its
// content security policy, its caching, and no sniffing, framing or
// referrer.
func setPageHeaders(h http.Header, csp, cacheControl string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", cacheControl)
}

// pageData is what the page templates know: nothing from the request.
type pageData struct {
	AssetVersion string
	TokenPaste   bool // billingd dev: the pasted-token sign-in form is offered
	SignIn       bool // OIDC sign-in is configured
}

// renderPage serves a page template.
func renderPage(tmpl *template.Template, data pageData) echo.HandlerFunc {
	return func(c echo.Context) error {
		var page bytes.Buffer
		if err := tmpl.Execute(&page, data); err != nil {
			return err
		}
		return c.HTMLBlob(http.StatusOK, page.Bytes())
	}
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

package rest

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPISpec is the OpenAPI 3 description of the HTTP API. The integration
// tests validate every request and response they make against it, so it
// cannot drift from the handlers unnoticed.
//
//go:embed openapi.yaml
var openAPISpec []byte

// OpenAPISpec returns the OpenAPI 3 description served at /openapi.yaml.
func OpenAPISpec() []byte { return openAPISpec }

func openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", openAPISpec)
}

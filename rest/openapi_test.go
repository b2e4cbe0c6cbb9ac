package rest

import (
	"context"
	"regexp"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPISpec())
	if err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	return doc
}

// TestOpenAPISpecValid: the served description parses and is a valid
// OpenAPI 3 document.
func TestOpenAPISpecValid(t *testing.T) {
	doc := loadSpec(t)
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3: %v", err)
	}
}

// TestOpenAPIDocumentsEveryRoute: every route the server registers is in the
// description with its method, so no endpoint is added without it.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadSpec(t)
	e := New(Config{})
	param := regexp.MustCompile(`:([a-z_]+)`)
	for _, r := range e.Routes() {
		path := param.ReplaceAllString(r.Path, "{$1}")
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is served but not in openapi.yaml", r.Method, path)
		}
	}
}

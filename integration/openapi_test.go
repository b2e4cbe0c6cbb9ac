package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/billingd/billingd/rest"
)

// The OpenAPI description is checked against the real server: h.send
// validates every request a test makes (unless the test marks it off-spec)
// and every response against rest's openapi.yaml, so a handler and its
// description cannot drift apart while the tests pass.

// apiSpec is the parsed description and a router over it, loaded once.
var apiSpec = sync.OnceValues(func() (*specChecker, error) {
	doc, err := openapi3.NewLoader().LoadFromData(rest.OpenAPISpec())
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &specChecker{doc: doc, router: router}, nil
})

type specChecker struct {
	doc    *openapi3.T
	router routers.Router
}

// exchange is one request on its way through h.send: what is needed to
// validate the response once it arrives.
type exchange struct {
	input *openapi3filter.RequestValidationInput // nil: no documented route
}

var specOptions = &openapi3filter.Options{
	// Authentication is the server's job and tested on its own; the
	// description only has to name the scheme.
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	// A status the description does not list is an error, not a pass.
	IncludeResponseStatus: true,
	// Never rewrite the body being sent (with defaults) behind a test's back.
	SkipSettingDefaults: true,
	MultiError:          true,
}

// checkRequest finds req's documented route and, unless offSpec, validates
// req against it. req's body is left as it was.
func (s *specChecker) checkRequest(t testing.TB, req *http.Request, offSpec bool) exchange {
	t.Helper()
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		if !offSpec {
			t.Errorf("openapi: %s %s is not described: %v", req.Method, req.URL.Path, err)
		}
		return exchange{}
	}
	input := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: specOptions}
	if offSpec {
		return exchange{input: input}
	}
	body := saveBody(t, req)
	if err := openapi3filter.ValidateRequest(req.Context(), input); err != nil {
		t.Errorf("openapi: request %s %s does not match the description: %v", req.Method, req.URL.Path, err)
	}
	body.restore()
	return exchange{input: input}
}

// checkResponse validates an answer: against its operation when the request
// had a documented route, else it must be the error envelope.
func (s *specChecker) checkResponse(t testing.TB, ex exchange, r response) {
	t.Helper()
	if ex.input == nil {
		s.checkErrorEnvelope(t, r)
		return
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: ex.input, Status: r.Status, Header: r.Header, Options: specOptions,
	}
	out.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("openapi: response %d to %s %s does not match the description: %v\nbody: %.500s",
			r.Status, ex.input.Request.Method, ex.input.Request.URL.Path, err, r.Body)
	}
}

// checkErrorEnvelope requires the answer to an undescribed request to be a
// documented error: a 4xx or 5xx carrying the Error schema.
func (s *specChecker) checkErrorEnvelope(t testing.TB, r response) {
	t.Helper()
	var err error
	switch ct := r.Header.Get("Content-Type"); {
	case r.Status < 400:
		err = errors.New("a request outside the description succeeded")
	case !strings.HasPrefix(ct, "application/json"):
		err = errors.New("content type " + ct)
	default:
		var body any
		if err = json.Unmarshal(r.Body, &body); err == nil {
			err = s.doc.Components.Schemas["Error"].Value.VisitJSON(body, openapi3.VisitAsResponse())
		}
	}
	if err != nil {
		t.Errorf("openapi: answer %d to an undescribed request is not the error envelope: %v\nbody: %.500s", r.Status, err, r.Body)
	}
}

// savedBody is a request body read into memory so that validation can
// consume it and the request still sends the same bytes.
type savedBody struct {
	req  *http.Request
	data []byte
}

func saveBody(t testing.TB, req *http.Request) savedBody {
	t.Helper()
	b := savedBody{req: req}
	if req.Body == nil || req.Body == http.NoBody {
		b.restore()
		return b
	}
	data, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("read request body: %v", err)
	}
	b.data = data
	b.restore()
	return b
}

// restore puts the body back. An empty one becomes http.NoBody: any other
// empty reader would make the client send it chunked.
func (b savedBody) restore() {
	if len(b.data) == 0 {
		b.req.Body = http.NoBody
		return
	}
	b.req.Body = io.NopCloser(bytes.NewReader(b.data))
}

// TestOpenAPIServed: /openapi.yaml is the embedded description, as YAML.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.do("GET", "/openapi.yaml", "", nil)
	wantStatus(t, r, http.StatusOK, "")
	if ct := r.Header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q, want application/yaml", ct)
	}
	if !bytes.Equal(r.Body, rest.OpenAPISpec()) {
		t.Error("/openapi.yaml is not the embedded description")
	}
}

package stripepaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// result is a response as the idempotency layer keeps it.
type result struct {
	status    int
	body      []byte
	save      bool   // keep under the request's idempotency key
	requestID string // of the request that produced it
	replayed  bool
}

// endpointFunc executes a request at one endpoint. It returns the object to
// answer with (200) or an error, an *apiError for Stripe's error answers.
type endpointFunc func(r *http.Request) (any, error)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(e Endpoint, fn endpointFunc) { mux.Handle(string(e), s.endpoint(e, fn)) }
	handle(CreateCustomer, s.createCustomer)
	handle(CreateSubscription, s.createSubscription)
	handle(UpdateSubscription, s.updateSubscription)
	handle(GetSubscription, s.getSubscription)
	handle(CancelSubscription, s.cancelSubscription)
	handle(CreatePreview, s.createPreview)
	handle(ListInvoices, s.listInvoices)
	handle(CreateSchedule, s.createSchedule)
	handle(UpdateSchedule, s.updateSchedule)
	handle(GetSchedule, s.getSchedule)
	handle(ReleaseSchedule, s.releaseSchedule)
	handle(CancelSchedule, s.cancelSchedule)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.write(w, errorResult(&apiError{
			status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path),
		}))
	})
	return mux
}

// endpoint wraps fn in what every Stripe endpoint does around it:
// authentication, form parsing, idempotency and, here, fault injection.
func (s *Server) endpoint(e Endpoint, fn endpointFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.count(e)
		if err := checkRequest(r); err != nil {
			s.write(w, errorResult(err))
			return
		}
		// Stripe applies idempotency keys to POST requests only.
		key := ""
		if r.Method == http.MethodPost {
			key = r.Header.Get("Idempotency-Key")
		}
		if key != "" {
			if res, proceed := s.claimKey(key, fingerprint(r)); !proceed {
				s.write(w, res)
				return
			}
		}
		arrived := time.Now()
		sub := s.subscriptionOf(e, r)
		s.running(sub, 1)
		defer s.running(sub, -1)
		fault, aimed := s.takeFaultFor(sub, e)
		if !aimed {
			fault = s.takeFault(e)
		}
		switch fault.kind {
		case stallExecution:
			sleep(r.Context(), fault.delay)
		case lingerExecution:
			sleep(context.Background(), fault.delay)
		}
		res, logged := s.executeLogged(e, fn, r, fault, sub, key, arrived)
		if key != "" {
			s.finishKey(key, res)
		}
		if e == GetSubscription && res.status == http.StatusOK {
			s.noteRead(sub)
		}
		s.deliver(w, r, res, fault)
		if logged >= 0 {
			// A client gone by now gave up before the answer came (a
			// delay, a stall held past its timeout).
			s.delivered(logged, time.Now(), r.Context().Err() != nil)
		}
	})
}

// executeLogged executes the request and, for a write to a subscription
// that succeeded, logs it with the states around it (made.go); logged is
// its place in the log, or -1.
func (s *Server) executeLogged(e Endpoint, fn endpointFunc, r *http.Request, fault Fault, sub, key string,
	arrived time.Time) (res result, logged int) {
	if sub == "" || r.Method == http.MethodGet {
		res, _ = s.execute(fn, r, fault)
		return res, -1
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	pending := s.beginWrite(e, sub, key, arrived)
	s.mu.Unlock()
	res, made := s.execute(fn, r, fault)
	if !made {
		return res, -1
	}
	answered := fault.kind != loseResponse && fault.kind != applyThenServerError && fault.kind != dropConnection
	s.mu.Lock()
	defer s.mu.Unlock()
	return res, s.endWrite(pending, answered)
}

func (s *Server) count(e Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[e]++
}

func checkRequest(r *http.Request) *apiError {
	if key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || key == "" {
		return &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error",
			message: "You did not provide an API key."}
	}
	if err := r.ParseForm(); err != nil {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error",
			message: "Invalid request body."}
	}
	if r.Method == http.MethodDelete {
		return parseDeleteBody(r)
	}
	return nil
}

// parseDeleteBody reads the form body of a DELETE into PostForm and Form:
// stripe-go sends a DELETE's parameters (a cancellation's prorate,
// invoice_now) in the body, as Stripe reads them, but net/http parses a
// body only for POST, PUT and PATCH.
func parseDeleteBody(r *http.Request) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	values, perr := url.ParseQuery(string(body))
	if err != nil || perr != nil {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error",
			message: "Invalid request body."}
	}
	r.PostForm = values
	for name, vs := range values {
		r.Form[name] = append(r.Form[name], vs...)
	}
	return nil
}

// fingerprint identifies a request for the idempotency check: the same key
// may only be used again for the same method, path and parameters.
// PostForm.Encode sorts the keys, so parameter order does not matter.
func fingerprint(r *http.Request) string {
	return r.Method + " " + r.URL.Path + "\n" + r.PostForm.Encode()
}

// execute runs fn, unless fault replaces the endpoint's answer; made
// reports whether fn ran and succeeded.
func (s *Server) execute(fn endpointFunc, r *http.Request, fault Fault) (res result, made bool) {
	switch fault.kind {
	case declineCard:
		res = errorResult(errCardDeclined())
	case serverError:
		res = errorResult(errServer())
	case rateLimited:
		res = errorResult(errRateLimited())
	case applyThenServerError:
		made = answer(fn(r)).status == http.StatusOK
		res = errorResult(errServer())
	default:
		res = answer(fn(r))
		made = res.status == http.StatusOK
	}
	s.mu.Lock()
	res.requestID = s.newID("req")
	s.mu.Unlock()
	return res, made
}

// deliver sends res, or loses it as fault says.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, res result, fault Fault) {
	switch fault.kind {
	case loseResponse:
		s.write(w, errorResult(errServer()))
	case dropConnection:
		// Makes net/http close the connection without a response (and
		// without logging a panic).
		panic(http.ErrAbortHandler)
	case delayAnswer:
		sleep(r.Context(), fault.delay)
		s.write(w, res) // fails quietly if the client has gone
	default:
		s.write(w, res)
	}
}

// write sends res with the headers Stripe sends: Request-Id and, for a
// replay, Idempotent-Replayed and the Original-Request it replays.
func (s *Server) write(w http.ResponseWriter, res result) {
	requestID := res.requestID
	if requestID == "" || res.replayed {
		s.mu.Lock()
		requestID = s.newID("req")
		s.mu.Unlock()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", requestID)
	if res.replayed {
		h.Set("Idempotent-Replayed", "true")
		h.Set("Original-Request", res.requestID)
	}
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body) // a write error means the client is gone
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// answer turns an endpoint's return values into a result.
func answer(v any, err error) result {
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{status: http.StatusInternalServerError, typ: "api_error", message: err.Error(), save: true}
		}
		return errorResult(ae)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return errorResult(&apiError{status: http.StatusInternalServerError, typ: "api_error", message: err.Error(), save: true})
	}
	return result{status: http.StatusOK, body: body, save: true}
}

// apiError is one of Stripe's error answers.
type apiError struct {
	status      int
	typ         string // invalid_request_error, card_error, idempotency_error, api_error
	code        string
	declineCode string
	param       string
	message     string
	// save: the endpoint had started executing, so Stripe keeps the answer
	// under the idempotency key. Parameter validation errors are not kept.
	save bool
}

func (e *apiError) Error() string { return e.message }

func errorResult(e *apiError) result {
	body, _ := json.Marshal(map[string]any{"error": errorJSON{
		Type: e.typ, Code: e.code, DeclineCode: e.declineCode, Param: e.param, Message: e.message,
	}})
	return result{status: e.status, body: body, save: e.save}
}

type errorJSON struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Param       string `json:"param,omitempty"`
	Message     string `json:"message"`
}

func errParamMissing(param string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "parameter_missing",
		param: param, message: "Missing required param: " + param + "."}
}

func errParamInvalid(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "parameter_invalid",
		param: param, message: fmt.Sprintf(format, args...)}
}

// errNoSuch: an id that does not exist. This is found while executing, so
// the answer is saved.
func errNoSuch(status int, param, kind, id string) *apiError {
	return &apiError{status: status, typ: "invalid_request_error", code: "resource_missing",
		param: param, message: fmt.Sprintf("No such %s: '%s'", kind, id), save: true}
}

func errCardDeclined() *apiError {
	return &apiError{status: http.StatusPaymentRequired, typ: "card_error", code: "card_declined",
		declineCode: "generic_decline", message: "Your card was declined.", save: true}
}

// errRateLimited is Stripe's rate limiter refusing a request before it
// executes: nothing is saved under its key.
func errRateLimited() *apiError {
	return &apiError{status: http.StatusTooManyRequests, typ: "invalid_request_error", code: "rate_limit",
		message: "Request rate limit exceeded."}
}

func errServer() *apiError {
	return &apiError{status: http.StatusInternalServerError, typ: "api_error",
		message: "An unknown error occurred.", save: true}
}

func errKeyReused() *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "idempotency_error",
		message: "Keys for idempotent requests can only be used with the same parameters they were first used with."}
}

func errKeyInUse() *apiError {
	return &apiError{status: http.StatusConflict, typ: "idempotency_error", code: "idempotency_key_in_use",
		message: "There is currently another in-progress request using this idempotency key."}
}

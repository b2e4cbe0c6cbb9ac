package stripepay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestStripeRequestsCarryTheirLength: every request billingd sends Stripe
// on a plan change's path carries its form with a Content-Length, never
// chunked (see sizedBody), and Stripe still reads the whole form.
func TestStripeRequestsCarryTheirLength(t *testing.T) {
	type seen struct {
		method, path string
		length       int64
		chunked      bool
		form         int
	}
	var mu sync.Mutex
	var requests []seen
	record := func(stripe http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			requests = append(requests, seen{r.Method, r.URL.Path, r.ContentLength, len(r.TransferEncoding) > 0, len(body)})
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			stripe.ServeHTTP(w, r)
		})
	}
	env := newFakeEnvBehind(t, Config{}, record)
	ctx := context.Background()
	change := env.change(priceScale, true)
	if _, err := env.p.PreviewPlanChange(ctx, change); err != nil {
		t.Fatal(err)
	}
	if _, err := env.p.ReadSubscription(ctx, env.cust.SubscriptionID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.p.ApplyPlanChange(ctx, change, "key_1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sent := map[string]bool{}
	for _, r := range requests {
		if r.chunked || r.length != int64(r.form) {
			t.Errorf("%s %s: Content-Length %d, chunked %v, form of %d bytes; want its length, not chunked",
				r.method, r.path, r.length, r.chunked, r.form)
		}
		sent[r.method+" "+r.path] = true
	}
	sub := "/v1/subscriptions/" + env.cust.SubscriptionID
	for _, want := range []string{"POST /v1/customers", "POST /v1/invoices/create_preview", "GET " + sub, "POST " + sub} {
		if !sent[want] {
			t.Errorf("no %s among %v", want, requests)
		}
	}
}

// TestSizedBodyLeavesTheRequestAlone: the caller's request is not changed,
// its body is closed, and the request sent can be resent from GetBody.
func TestSizedBodyLeavesTheRequestAlone(t *testing.T) {
	var sent *http.Request
	rt := sizedBody{roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})}
	body := &closeRecorder{Reader: strings.NewReader("plan=pro&quantity=2")}
	req, _ := http.NewRequest(http.MethodPost, "http://stripe.test/v1/subscriptions/sub_1", nil)
	req.Body = body // as stripe-go sets it: no ContentLength
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 || req.Body != body || !body.closed {
		t.Errorf("caller's request: length %d, body replaced %v, closed %v; want 0, same body, closed",
			req.ContentLength, req.Body != body, body.closed)
	}
	if sent == req || sent.ContentLength != 19 {
		t.Fatalf("sent the caller's request (%v) or length %d, want a copy of length 19", sent == req, sent.ContentLength)
	}
	for range 2 {
		again, _ := sent.GetBody()
		if b, _ := io.ReadAll(again); string(b) != "plan=pro&quantity=2" {
			t.Errorf("GetBody gave %q", b)
		}
	}

	get, _ := http.NewRequest(http.MethodGet, "http://stripe.test/v1/subscriptions/sub_1", nil)
	if _, err := rt.RoundTrip(get); err != nil || sent != get {
		t.Errorf("a request without a body should pass as is (err %v)", err)
	}

	// stripe-go's GET: its form in the URL, an empty reader as the body,
	// which net/http would probe in a goroutine.
	empty, _ := http.NewRequest(http.MethodGet, "http://stripe.test/v1/subscriptions/sub_1?expand[]=items", nil)
	empty.Body = &closeRecorder{Reader: strings.NewReader("")}
	if _, err := rt.RoundTrip(empty); err != nil {
		t.Fatal(err)
	}
	if sent == empty || sent.Body != http.NoBody || sent.ContentLength != 0 {
		t.Errorf("an empty body sent as %T, length %d; want http.NoBody, 0", sent.Body, sent.ContentLength)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

package stripepay

import (
	"bytes"
	"io"
	"net/http"
)

// sizedBody is the transport under every Provider's client: it tells
// net/http the length of stripe-go's request bodies.
//
// stripe-go encodes a request's form into memory, then hands it to net/http
// behind a wrapper of its own (a fresh reader per attempt, so that retries
// resend it), without setting Request.ContentLength. To net/http that is a
// body of unknown length: before every POST it reads one byte in a new
// goroutine under a 200 ms timer to learn whether the body is empty, then
// sends it with Transfer-Encoding: chunked and flushes the headers, that
// byte and the rest separately: three writes to the socket (three TLS
// records to Stripe) where one would do. On a machine where a system call
// is expensive (make bench's, 5 µs each) the writes and the goroutine were
// a measurable part of a plan change's CPU.
//
// The form is already in memory, so reading it here costs a copy of a few
// hundred bytes; the request sent carries that copy with its length, and a
// GetBody that net/http uses to resend it on a dead keep-alive connection.
type sizedBody struct{ next http.RoundTripper }

func (t sizedBody) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength != 0 {
		return t.next.RoundTrip(req)
	}
	form, err := io.ReadAll(req.Body)
	req.Body.Close() // a RoundTripper closes the body it was given, always
	if err != nil {
		return nil, err
	}
	sized := req.WithContext(req.Context()) // a RoundTripper must not change the caller's request
	sized.ContentLength = int64(len(form))
	sized.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(form)), nil }
	sized.Body, _ = sized.GetBody()
	if len(form) == 0 {
		sized.Body = http.NoBody
	}
	return t.next.RoundTrip(sized)
}

package stripepay

import (
	"bytes"
	"io"
	"net/http"
)

// sizedBody is the outermost transport of every Provider's client: it
// tells net/http the length of stripe-go's request bodies.
//
// stripe-go encodes a request's form into memory, then hands it to net/http
// behind a reader of its own (a fresh one per attempt, so that its retries
// resend the form), without setting Request.ContentLength. To net/http that
// is a body of unknown length. A POST then goes out chunked, its headers
// flushed before the body: three writes to the socket where one would do
// (seen with strace on make bench's billingd, over HTTP/1.1). A GET, whose
// form stripe-go moves into the URL, still carries an empty reader, and
// net/http reads one byte of it in a new goroutine under a 200 ms timer to
// learn that it is empty. On make bench's machine, where a system call
// costs about a microsecond and a write over loopback several, that was
// 2 of a first call's 17 reads and writes.
//
// The form is already in memory, so reading it here costs a copy of a few
// hundred bytes. The request sent is a copy of the caller's with that form
// and its length (an empty one is http.NoBody), and a GetBody over the
// copy, which net/http uses to resend the request on a keep-alive
// connection that died (stripe-go's own GetBody did the same before).
type sizedBody struct{ next http.RoundTripper }

func (t sizedBody) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength != 0 { // known: none, or its length (-1: streamed)
		return t.next.RoundTrip(req)
	}
	form, err := io.ReadAll(req.Body)
	req.Body.Close() // a RoundTripper closes the body it was given, always
	if err != nil {
		return nil, err
	}
	sized := req.WithContext(req.Context()) // a RoundTripper must not change the caller's request
	sized.ContentLength = int64(len(form))
	sized.GetBody = func() (io.ReadCloser, error) {
		if len(form) == 0 {
			return http.NoBody, nil
		}
		return io.NopCloser(bytes.NewReader(form)), nil
	}
	sized.Body, _ = sized.GetBody()
	return t.next.RoundTrip(sized)
}

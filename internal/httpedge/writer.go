package httpedge

import (
	"mime"
	"net/http"
)

// writer is the edge's view of a response. It records the status for the
// access log, sets the headers every response must carry at the moment the
// header block is written (a handler cannot drop them), and turns an error a
// handler wrote as plain text (http.Error; the MCP SDK does) into the
// contract's envelope. A JSON error body is left as it is: it is either
// already the envelope (rest) or a JSON-RPC error, which MCP clients read.
type writer struct {
	http.ResponseWriter
	r       *http.Request
	noStore bool

	wroteHeader bool
	status      int
	// discard drops the handler's own body of an error the edge rewrote.
	discard bool
}

func (w *writer) WriteHeader(status int) {
	if status < http.StatusOK { // informational (103 Early Hints): the real answer follows
		w.ResponseWriter.WriteHeader(status)
		return
	}
	if w.wroteHeader {
		return
	}
	w.wroteHeader, w.status = true, status
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if w.noStore {
		h.Set("Cache-Control", "no-store")
	}
	if status >= 400 && !isJSON(h.Get("Content-Type")) {
		w.discard = true
		writeEnvelope(w.ResponseWriter, w.r, status, errorForStatus(status))
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.discard {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends what was written so far (server-sent events of MCP).
func (w *writer) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.discard {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func isJSON(contentType string) bool {
	media, _, err := mime.ParseMediaType(contentType)
	return err == nil && media == "application/json"
}

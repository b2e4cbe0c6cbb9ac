package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/billingd/billingd/internal/httpedge"
)

// headers is the HTTP side's transport: it adds the bearer token and the
// negotiated protocol version to every request, and turns a refusal that
// carries no JSON-RPC error into a *refusal, which the SDK passes back to
// the bridge intact (a plain 401 would only become "Unauthorized" and break
// the connection).
//
// The token goes only to BILLINGD_URL's own origin (scheme, host and
// port): a request for any other is refused before it is sent, and the
// client follows no redirect (refuseRedirect), so neither a proxy nor a
// misconfigured billingd answering 307 can send the token elsewhere, or
// over plain http to a host that is not loopback.
type headers struct {
	token  string
	origin *url.URL // BILLINGD_URL
	base   http.RoundTripper

	mu      sync.Mutex
	version string // from the initialize result
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if !sameOrigin(r.URL, h.origin) {
		return nil, fmt.Errorf("refusing to send the access token to %s, which is not BILLINGD_URL's origin", r.URL.Redacted())
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	if v := h.protocolVersion(); v != "" && r.Header.Get("Mcp-Protocol-Version") == "" {
		r.Header.Set("Mcp-Protocol-Version", v)
	}
	resp, err := h.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	return refused(resp)
}

// sameOrigin reports whether u is on origin's scheme, host and port.
func sameOrigin(u, origin *url.URL) bool {
	return strings.EqualFold(u.Scheme, origin.Scheme) && strings.EqualFold(u.Hostname(), origin.Hostname()) &&
		portOf(u) == portOf(origin)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "http") {
		return "80"
	}
	return "443"
}

// redirectError is a redirect billingd (or something in front of it)
// answered: the bridge follows none, since the token would go with it.
type redirectError struct{ to string }

func (e *redirectError) Error() string {
	return fmt.Sprintf("billingd answered with a redirect to %s, which the bridge never follows (the access token would go with it): "+
		"set BILLINGD_URL to billingd's own PUBLIC_BASE_URL", e.to)
}

// refuseRedirect is the bridge's http.Client CheckRedirect.
func refuseRedirect(r *http.Request, _ []*http.Request) error {
	return &redirectError{to: r.URL.Redacted()}
}

func (h *headers) protocolVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.version
}

// learnVersion reads protocolVersion from an initialize result. The SDK's
// connection would send it itself had its own client session initialized;
// here the agent's did, so the bridge tells it.
func (h *headers) learnVersion(result json.RawMessage) {
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(result, &r) == nil && r.ProtocolVersion != "" {
		h.mu.Lock()
		h.version = r.ProtocolVersion
		h.mu.Unlock()
	}
}

// refusal is billingd's 401 or 403 with the contract's error envelope (an
// invalid or expired token, a foreign Host), as opposed to the scope gate's
// 403, whose body is the call's JSON-RPC error and reaches the agent as is.
type refusal struct {
	status int
	detail httpedge.ErrorDetail
}

func (r *refusal) Error() string {
	msg := fmt.Sprintf("billingd refused the request (HTTP %d)", r.status)
	if r.detail.Code != "" {
		msg += ": " + string(r.detail.Code) + ": " + r.detail.Message
	}
	return msg
}

// refused passes a refusal whose body is a JSON-RPC response on to the SDK,
// and makes any other a *refusal error.
func refused(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err == nil {
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			if _, ok := msg.(*jsonrpc.Response); ok {
				resp.Body = io.NopCloser(bytes.NewReader(body))
				return resp, nil
			}
		}
	}
	r := &refusal{status: resp.StatusCode}
	var envelope httpedge.Envelope
	if json.Unmarshal(body, &envelope) == nil {
		r.detail = envelope.Error
	}
	return nil, r
}

// errorFor is the agent's answer to a call billingd could not answer: the
// server's own JSON-RPC error when it sent one (a missing scope), else the
// bridge's, naming the variable to look at.
func (b *bridge) errorFor(err error) *jsonrpc.Error {
	var r *refusal
	if errors.As(err, &r) {
		data, _ := json.Marshal(httpedge.Envelope{Error: r.detail})
		return &jsonrpc.Error{Code: CodeTokenRefused, Data: data,
			Message: oneLine(fmt.Sprintf("BILLINGD_ACCESS_TOKEN: %v (BILLINGD_URL %s)", r, b.cfg.URL))}
	}
	// The SDK wraps the server's error first, then its own marker
	// "rejected by transport" (-32005), also a *jsonrpc.Error, which says
	// nothing to the agent.
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) && rpc.Code != codeSDKRejected {
		return rpc
	}
	return &jsonrpc.Error{Code: CodeUnreachable, Message: oneLine(b.describe(err))}
}

// codeSDKRejected is the code of the SDK's internal marker for a message
// its transport did not deliver (jsonrpc2.ErrRejected, not exported).
const codeSDKRejected = -32005

// fatal reports whether a failed write ends the bridge, and why: a token
// refused with 401 stays refused (the variable cannot change under a running
// process), and a server that cannot be reached, or dropped the connection,
// has lost the session. Other failures answer only their call: a 403 scope
// refusal, a 503, and a response whose headers did not come in time (a
// long-lived stream a server holds back; the next call may well work).
func (b *bridge) fatal(err error) error {
	var r *refusal
	if errors.As(err, &r) {
		if r.status == http.StatusUnauthorized {
			return errors.New(oneLine(fmt.Sprintf("BILLINGD_ACCESS_TOKEN: %v (BILLINGD_URL %s)", r, b.cfg.URL)))
		}
		return nil
	}
	var network *url.Error
	if !errors.As(err, &network) {
		return nil
	}
	var op *net.OpError
	if network.Timeout() && !(errors.As(err, &op) && op.Op == "dial") {
		return nil
	}
	return errors.New(oneLine(b.describe(err)))
}

// describe names BILLINGD_URL and the reason without the SDK's framing.
func (b *bridge) describe(err error) string {
	var redirect *redirectError
	if errors.As(err, &redirect) {
		return fmt.Sprintf("BILLINGD_URL %s: %v", b.cfg.URL, redirect)
	}
	var network *url.Error
	if errors.As(err, &network) {
		return fmt.Sprintf("BILLINGD_URL %s: cannot reach billingd: %v", b.cfg.URL, network.Err)
	}
	return fmt.Sprintf("BILLINGD_URL %s: billingd gave no answer: %v", b.cfg.URL, err)
}

// oneLine keeps an error to the one line the command's contract allows.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

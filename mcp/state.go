package mcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/billingd/billingd/billing"
)

// pending is a proposal billingd has put to the user through the client and
// not yet concluded: what the next round of the tool call needs to execute
// or cancel it. On protocol 2025-11-25 it stays in the handler's memory; on
// 2026-07-28 the client carries it between rounds as the request state,
// sealed by stateSealer.
type pending struct {
	Org       string `json:"org"`
	Principal string `json:"sub"`
	// Client is the access token's client (azp or client_id) that was asked;
	// "" when the token names none.
	Client string `json:"client"`
	// Protocol is the protocol version of the call that asked.
	Protocol string `json:"protocol"`
	// Mode is the elicitation billingd sent: modeForm or modeURL. The
	// client's capability decided it (howToAsk).
	Mode string `json:"mode"`
	// Proposal is the first call's result, confirm_token included: the form
	// round redeems the token, the URL round hands the proposal to the agent.
	Proposal billing.ChangeResult `json:"proposal"`
	// NotAfter bounds the state's authority: the confirmation's expiry plus
	// the largest clock skew billing allows. After it an answer no longer
	// executes or cancels anything; billing's record of the confirmation
	// still answers its owner (tools.lateRound). billing decides expiry by
	// the database clock; this only stops old answers from counting forever.
	NotAfter time.Time `json:"not_after"`
}

// matches reports whether p was made for this caller and this call. A state
// sealed for another principal, org, client, operation, plan or time is
// refused even though its seal is genuine; whether the call asks for the
// proposed change is billing's rule (ChangeResult.Asks).
func (p pending) matches(caller billing.Caller, call billing.ChangeRequest) bool {
	return p.Org == caller.Org && p.Principal == caller.Principal && p.Client == caller.Client &&
		p.Proposal.Asks(call) && p.Proposal.ConfirmToken != "" && p.Proposal.ConfirmationID != ""
}

// secondCall redeems p's token for the agent, who never saw it: no answer
// may send it back with one.
func (p pending) secondCall() billing.ChangeRequest {
	return p.Proposal.SecondCall()
}

// askedOf reports whether a next round declared as client answers the
// question p asked: multi-round-trip on the same protocol version, from a
// client billingd would ask the same way (a form, or a URL, and not its
// view). A client that cannot show the dialog, or a 2025-11-25 session,
// never answers one.
func (p pending) askedOf(client declaration) bool {
	return client.usesInputRequests() && client.protocol == p.Protocol &&
		p.Mode != "" && howToAsk(p.Proposal, client.caps) == p.Mode
}

// Request state format: "v1." and the base64url AES-256-GCM sealing (random
// nonce first) of pending as JSON.
const (
	stateVersion  = "v1."
	maxStateBytes = 8 << 10
	stateKeyInfo  = "billingd mcp request state v1"
	// MinRequestStateKeyBytes is the shortest secret accepted as
	// MCP_REQUEST_STATE_KEY: 256 bits if it is random.
	MinRequestStateKeyBytes = 32
)

// errBadState: the request state was not sealed by billingd with this key,
// or was altered. The caller learns nothing more.
var errBadState = errors.New("request state refused")

// stateSealer seals and opens request states. The state travels through the
// client, which may be buggy or hostile, and holds a confirmation token, so
// it is encrypted and authenticated (AES-GCM), not merely signed: the client
// can neither read the token nor change a byte unnoticed.
//
// Several replicas share one database but no memory, and a 2026-07-28
// client may send the next round to another replica, so the key is shared
// configuration (MCP_REQUEST_STATE_KEY) rather than per-process.
type stateSealer struct {
	aead cipher.AEAD
	// onSeal, if set, runs whenever a state is sealed.
	onSeal func()
}

// newStateSealer derives the AES key from secret with HKDF, so that the
// configured secret may be any high-entropy string and is never used for
// anything else directly.
func newStateSealer(secret []byte) (stateSealer, error) {
	if len(secret) < MinRequestStateKeyBytes {
		return stateSealer{}, fmt.Errorf("request state key: want at least %d bytes, got %d", MinRequestStateKeyBytes, len(secret))
	}
	key, err := hkdf.Key(sha256.New, secret, nil, stateKeyInfo, 32)
	if err != nil {
		return stateSealer{}, fmt.Errorf("request state key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return stateSealer{}, fmt.Errorf("request state key: %w", err)
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return stateSealer{}, fmt.Errorf("request state key: %w", err)
	}
	return stateSealer{aead: aead}, nil
}

// randomStateSecret is the key of a process started without
// MCP_REQUEST_STATE_KEY: request states then only open in this process.
func randomStateSecret() []byte {
	b := make([]byte, MinRequestStateKeyBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// orRandom is secret, or a random one when it is empty.
func orRandom(secret []byte) []byte {
	if len(secret) == 0 {
		return randomStateSecret()
	}
	return secret
}

func (s stateSealer) seal(p pending) (string, error) {
	if s.onSeal != nil {
		s.onSeal()
	}
	plain, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seal request state: %w", err)
	}
	sealed := s.aead.Seal(nil, nil, plain, []byte(stateVersion))
	return stateVersion + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// open returns the pending proposal sealed in state, or errBadState. It
// checks the seal only; the caller checks whom it was made for
// (pending.matches, pending.askedOf) and its age (NotAfter).
func (s stateSealer) open(state string) (pending, error) {
	body, ok := strings.CutPrefix(state, stateVersion)
	if !ok || len(state) > maxStateBytes {
		return pending{}, errBadState
	}
	sealed, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return pending{}, errBadState
	}
	plain, err := s.aead.Open(nil, nil, sealed, []byte(stateVersion))
	if err != nil {
		return pending{}, errBadState
	}
	var p pending
	if err := json.Unmarshal(plain, &p); err != nil {
		return pending{}, errBadState
	}
	return p, nil
}

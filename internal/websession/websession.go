// Package websession holds the records of people signed in on billingd's
// pages: a sign-in in progress (Login) and a signed-in browser (Session).
// Both live in PostgreSQL (internal/postgres), so that any replica can take
// the callback of a sign-in another replica started, and any replica can
// serve the next page. Browsers hold random values in cookies; only their
// SHA-256 is stored.
package websession

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"time"
)

// ErrNotFound: no such login or session, or it expired.
var ErrNotFound = errors.New("websession: not found")

// MaxReturnTo bounds the return address a sign-in keeps: billingd's own
// paths are short, and every byte of it is stored before anyone signed in.
const MaxReturnTo = 512

// LimitedError refuses a sign-in start over a limit: RetryAfter is when a
// slot frees.
type LimitedError struct {
	RetryAfter time.Duration
}

func (e *LimitedError) Error() string { return "websession: too many sign-ins started" }

// LoginLimits bound the sign-ins that may be started, before anyone has
// signed in: per client address and in all, per Window. They are counted in
// the shared store, so they hold across replicas (concurrent starts can
// overshoot by the number in flight); with the sign-ins' lifetime they bound
// what unauthenticated requests can make billingd store. 0: no limit.
type LoginLimits struct {
	Window    time.Duration
	PerClient int
	Total     int
}

// Login is a sign-in in progress.
type Login struct {
	StateHash    []byte // SHA-256 of the state sent to the identity provider
	BrowserHash  []byte // SHA-256 of the cookie that binds the sign-in to the browser
	Nonce        string
	CodeVerifier string // PKCE
	ReturnTo     string // a path on billingd
	VerifyID     string // the confirmation a verification sign-in is for, or ""
	Client       string // the address of the browser that started it, for LoginLimits
	CreatedAt    time.Time
	TTL          time.Duration
}

// Session is a signed-in browser.
type Session struct {
	IDHash   []byte
	CSRF     string // the synchronizer token of the session's forms and API calls
	Org      string
	Subject  string
	Client   string // billingd's OIDC client, the access token's azp
	Scopes   []string
	AuthTime time.Time
	ACR      string
	// VerifyID is the confirmation this session's sign-in was a fresh
	// authentication for (the verification page), with that sign-in's
	// auth_time and acr.
	VerifyID       string
	VerifyAuthTime time.Time
	VerifyACR      string
	ExpiresAt      time.Time
}

// Store keeps logins and sessions.
type Store interface {
	// SaveLogin stores a sign-in in progress unless that would exceed
	// limits: then it stores nothing and returns a *LimitedError.
	SaveLogin(ctx context.Context, l Login, limits LoginLimits) error
	// TakeLogin deletes and returns the unexpired login: a state is used once.
	TakeLogin(ctx context.Context, stateHash []byte) (Login, error)
	SaveSession(ctx context.Context, s Session) error
	// Session returns the unexpired session.
	Session(ctx context.Context, idHash []byte) (Session, error)
	DeleteSession(ctx context.Context, idHash []byte) error
}

// NewSecret is a random cookie value.
func NewSecret() string { return rand.Text() + rand.Text() }

// Hash is how a secret is stored.
func Hash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

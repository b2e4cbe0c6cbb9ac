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
	"net/netip"
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
// signed in, per Window: per client address (AddressBucket) and in all, or,
// for a sign-in to verify or approve a pending confirmation, per
// confirmation instead. A start is counted when it is made, in the shared
// store (so the limits hold across replicas), whatever becomes of the
// sign-in later; with the sign-ins' lifetime they bound what
// unauthenticated requests can make billingd store. 0: no limit.
//
// A confirmation's own budget is what keeps a flood of anonymous starts,
// which fills Total, from stopping the person a pending confirmation waits
// for: its starts are not counted in Total nor per address (a person behind
// one address with the flood is not blocked either). Only someone who knows
// the confirmation's id can spend its budget, and only while it is pending;
// what that can make billingd store is bounded by the confirmations
// themselves, which only authenticated callers make, at a limited rate.
type LoginLimits struct {
	Window          time.Duration
	PerClient       int
	Total           int
	PerConfirmation int
}

// AddressBucket is what sign-in starts from addr are counted by: an IPv4
// address (an IPv4-mapped IPv6 address as IPv4) by itself, an IPv6 address
// by its /64, the smallest network a site is given, since one host may use
// every address of its /64. Anything else (no address) is one bucket.
func AddressBucket(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "unknown"
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// Login is a sign-in in progress.
type Login struct {
	StateHash    []byte // SHA-256 of the state sent to the identity provider
	BrowserHash  []byte // SHA-256 of the cookie that binds the sign-in to the browser
	Nonce        string
	CodeVerifier string // PKCE
	ReturnTo     string // a path on billingd
	VerifyID     string // the confirmation a verification sign-in is for, or ""
	Client       string // the AddressBucket of the browser that started it, for LoginLimits
	// ForConfirmation names the confirmation a sign-in to verify or approve
	// is for: while that confirmation waits for it, the start is counted in
	// the confirmation's budget (LoginLimits.PerConfirmation), not per
	// address nor in the total.
	ForConfirmation string
	CreatedAt       time.Time
	TTL             time.Duration
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
	// SaveLogin counts the start and stores the sign-in in progress unless
	// that would exceed limits: then it counts and stores nothing and
	// returns a *LimitedError.
	SaveLogin(ctx context.Context, l Login, limits LoginLimits) error
	// TakeLogin deletes and returns the unexpired login of that state if
	// it was started by the browser of browserHash: a state is used once,
	// and only by its own browser; another browser's attempt (ErrNotFound)
	// leaves it alone.
	TakeLogin(ctx context.Context, stateHash, browserHash []byte) (Login, error)
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

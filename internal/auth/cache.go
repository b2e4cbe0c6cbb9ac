package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Verified tokens are remembered for a short while: checking an ES256 or
// RS256 signature is the largest single cost of a call (about 135 µs of
// ~600 µs per first call in make bench), and agents send the same token
// call after call. An entry never outlives the token's exp, and lasts at
// most cacheTTL, so a key the issuer withdraws stops working within that.
const (
	cacheTTL     = 60 * time.Second
	cacheEntries = 10_000
)

type cachedIdentity struct {
	id    Identity
	until time.Time
}

// verifiedCache maps the SHA-256 of a raw token to the identity it proved.
type verifiedCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedIdentity
}

func (c *verifiedCache) get(raw string, now time.Time) (Identity, bool) {
	key := sha256.Sum256([]byte(raw))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.until) {
		return Identity{}, false
	}
	return e.id, true
}

func (c *verifiedCache) put(raw string, id Identity, now time.Time) {
	until := now.Add(cacheTTL)
	if id.Expiry.Before(until) {
		until = id.Expiry
	}
	key := sha256.Sum256([]byte(raw))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= cacheEntries {
		// Full: start over rather than track ages; a miss only costs one
		// signature check.
		c.entries = make(map[[sha256.Size]byte]cachedIdentity)
	}
	c.entries[key] = cachedIdentity{id: id, until: until}
}

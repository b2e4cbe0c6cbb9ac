package auth

import (
	"crypto"
	"crypto/sha256"
	"sync"
	"time"
)

// Verified tokens are remembered: checking an ES256 or RS256 signature was
// the largest single cost of a call (about 12% of billingd's CPU per first
// call in make bench), and clients send the same token call after call
// until it expires.
//
// An entry is keyed by the SHA-256 of the whole raw token (a token that
// differs in one byte is another key, checked in full), never outlives the
// token's exp, and remembers the kid and the public key that verified it: a
// hit counts only while the issuer's key set still serves that key under
// that kid, so a key withdrawn or replaced at the issuer stops its tokens
// as soon as billingd's copy of the JWKS has it (the periodic refresh, or
// the refresh an unknown kid triggers), as it would without the cache. A
// token without a kid is checked against every key and is not remembered.
//
// The cache is bounded by an estimate of the memory its entries hold
// (cacheBytes): when full, expired entries go first, then arbitrary ones
// until a quarter is free. A miss costs one signature check.
const cacheBytes = 16 << 20

// entryOverhead estimates what an entry costs besides its strings: the
// map's slot (key, value) and the identity's fixed fields.
// TestVerifiedCacheMemoryBound measures it.
const entryOverhead = 320

type cachedIdentity struct {
	id  Identity
	kid string
	key crypto.PublicKey
	// from is the token's nbf less the leeway (zero without nbf), until
	// its exp: a hit counts only inside [from, until), checked on every
	// request, so that the cache accepts no token at a moment the full
	// check would refuse it as expired or not yet valid, even after the
	// clock is set back.
	from, until time.Time
	size        int
}

// verifiedCache maps the SHA-256 of a raw token to the identity it proved.
type verifiedCache struct {
	mu       sync.Mutex
	entries  map[[sha256.Size]byte]cachedIdentity
	bytes    int
	maxBytes int // 0: cacheBytes
}

func (c *verifiedCache) get(raw string, now time.Time) (cachedIdentity, bool) {
	key := sha256.Sum256([]byte(raw))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return cachedIdentity{}, false
	}
	if !now.Before(e.until) {
		c.removeLocked(key)
		return cachedIdentity{}, false
	}
	if now.Before(e.from) {
		return cachedIdentity{}, false // the full check answers "not valid yet"
	}
	return e, true
}

func (c *verifiedCache) remove(raw string) {
	key := sha256.Sum256([]byte(raw))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(key)
}

func (c *verifiedCache) removeLocked(key [sha256.Size]byte) {
	if e, ok := c.entries[key]; ok {
		c.bytes -= e.size
		delete(c.entries, key)
	}
}

// put remembers id, proved by raw's signature with key (kid), from
// notBefore (the token's nbf less the leeway; zero: none) until the
// token's exp.
func (c *verifiedCache) put(raw, kid string, key crypto.PublicKey, id Identity, notBefore, now time.Time) {
	if kid == "" || key == nil || !now.Before(id.Expiry) {
		return
	}
	e := cachedIdentity{id: id, kid: kid, key: key, from: notBefore, until: id.Expiry, size: entrySize(id, kid)}
	limit := c.maxBytes
	if limit == 0 {
		limit = cacheBytes
	}
	if e.size > limit/4 {
		return
	}
	h := sha256.Sum256([]byte(raw))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[[sha256.Size]byte]cachedIdentity)
	}
	c.removeLocked(h)
	if c.bytes+e.size > limit {
		c.evictLocked(now, limit*3/4-e.size)
	}
	c.entries[h] = e
	c.bytes += e.size
}

// evictLocked drops expired entries, then arbitrary ones (map order), until
// the entries hold at most target bytes.
func (c *verifiedCache) evictLocked(now time.Time, target int) {
	for k, e := range c.entries {
		if !now.Before(e.until) {
			c.removeLocked(k)
		}
	}
	for k := range c.entries {
		if c.bytes <= target {
			return
		}
		c.removeLocked(k)
	}
}

// entrySize estimates the memory an entry holds.
func entrySize(id Identity, kid string) int {
	n := entryOverhead + len(kid) + len(id.Subject) + len(id.Org) + len(id.Client) + len(id.ACR)
	for _, s := range id.Scopes {
		n += 16 + len(s)
	}
	return n
}

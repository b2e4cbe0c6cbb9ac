package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

const testIssuer = "https://issuer.test"

// keySet is an issuer's JWKS as billingd's copy of it holds it: a test
// changes it as a refresh would.
type keySet struct {
	t     testing.TB
	store *jwkset.MemoryJWKSet
}

func (s keySet) publish(kid string, priv *ecdsa.PrivateKey) {
	s.t.Helper()
	jwk, err := jwkset.NewJWKFromKey(&priv.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgES256}})
	if err != nil {
		s.t.Fatal(err)
	}
	_, _ = s.store.KeyDelete(context.Background(), kid)
	if err := s.store.KeyWrite(context.Background(), jwk); err != nil {
		s.t.Fatal(err)
	}
}

func (s keySet) withdraw(kid string) {
	if _, err := s.store.KeyDelete(context.Background(), kid); err != nil {
		s.t.Fatal(err)
	}
}

// cacheVerifier is a Verifier over a key set the test controls.
func cacheVerifier(t testing.TB) (*Verifier, keySet) {
	t.Helper()
	store := jwkset.NewMemoryStorage()
	kf, err := keyfunc.New(keyfunc.Options{Storage: store})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := withDefaults(Config{Issuer: testIssuer, Audiences: []string{"https://billing.test"}})
	if err != nil {
		t.Fatal(err)
	}
	return &Verifier{issuer: testIssuer, orgClaim: cfg.OrgClaim, keys: kf, options: parserOptions(cfg), stop: func() {}},
		keySet{t: t, store: store}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signES256(t testing.TB, priv *ecdsa.PrivateKey, kid string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": testIssuer, "aud": "https://billing.test", "sub": "user-1", "org_id": "org-1",
		"scope": "billing:read billing:write", "exp": float64(exp.Unix()),
	})
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifiedToken is a verifier with key k1 published and a token signed
// with it, verified once (so remembered).
func verifiedToken(t testing.TB) (*Verifier, keySet, string) {
	t.Helper()
	v, keys := cacheVerifier(t)
	priv := newKey(t)
	keys.publish("k1", priv)
	raw := signES256(t, priv, "k1", time.Now().Add(time.Hour))
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	return v, keys, raw
}

func cached(v *Verifier, raw string) bool {
	_, ok := v.verified.get(raw, time.Now())
	return ok
}

func TestVerifiedCacheNeverOutlivesTheToken(t *testing.T) {
	now := time.Now()
	var c verifiedCache
	key := &newKey(t).PublicKey
	c.put("short", "k1", key, Identity{Subject: "a", Expiry: now.Add(time.Second)}, time.Time{}, now)
	c.put("long", "k1", key, Identity{Subject: "b", Expiry: now.Add(time.Hour)}, time.Time{}, now)
	c.put("expired", "k1", key, Identity{Subject: "c", Expiry: now}, time.Time{}, now)
	if len(c.entries) != 2 {
		t.Fatalf("%d entries, want 2: an expired token is not stored", len(c.entries))
	}
	cases := []struct {
		raw  string
		at   time.Duration
		want bool
	}{
		{"short", 500 * time.Millisecond, true},
		{"short", time.Second, false}, // at exp: expired
		{"long", 59 * time.Minute, true},
		{"long", time.Hour, false},
		{"expired", 0, false}, // never stored
		{"unknown", 0, false},
	}
	for _, tc := range cases {
		if _, ok := c.get(tc.raw, now.Add(tc.at)); ok != tc.want {
			t.Errorf("get(%q) after %s = %v, want %v", tc.raw, tc.at, ok, tc.want)
		}
	}
}

// A remembered token counts only from its nbf (less the leeway) on, checked
// at every lookup: after the clock is set back before nbf, the cache
// answers a miss and the full check refuses the token as not valid yet.
func TestVerifiedCacheKeepsNotBefore(t *testing.T) {
	now := time.Now()
	var c verifiedCache
	key := &newKey(t).PublicKey
	c.put("nbf", "k1", key, Identity{Subject: "a", Expiry: now.Add(time.Hour)}, now.Add(-time.Minute), now)
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {-time.Minute, true}, {-time.Minute - time.Second, false}, {-time.Hour, false}, {time.Minute, true}} {
		if _, ok := c.get("nbf", now.Add(tc.at)); ok != tc.want {
			t.Errorf("get at %s = %v, want %v", tc.at, ok, tc.want)
		}
	}
	// A miss before nbf does not forget the token.
	if _, ok := c.get("nbf", now); !ok {
		t.Error("the token was forgotten")
	}
}

// Verify remembers a token's nbf, less the configured leeway.
func TestVerifyRemembersNotBefore(t *testing.T) {
	v, keys := cacheVerifier(t)
	v.leeway = 30 * time.Second
	priv := newKey(t)
	keys.publish("k1", priv)
	now := time.Now().Truncate(time.Second)
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": testIssuer, "aud": "https://billing.test", "sub": "user-1", "org_id": "org-1",
		"exp": float64(now.Add(time.Hour).Unix()), "nbf": float64(now.Unix()),
	})
	tok.Header["kid"] = "k1"
	raw, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.verified.get(raw, now.Add(-29*time.Second)); !ok {
		t.Error("not remembered within the leeway before nbf")
	}
	if _, ok := v.verified.get(raw, now.Add(-31*time.Second)); ok {
		t.Error("remembered as valid before nbf less the leeway")
	}
}

// The cache never holds more than its byte budget, however many tokens
// come by; and the estimate it counts by is not below what an entry really
// costs.
func TestVerifiedCacheMemoryBound(t *testing.T) {
	now := time.Now()
	key := &newKey(t).PublicKey
	id := func(i int) Identity {
		return Identity{Subject: fmt.Sprintf("user-%08d", i), Org: fmt.Sprintf("org-%08d", i), Client: "agent-1",
			Scopes: []string{"billing:read", "billing:write"}, Expiry: now.Add(time.Hour)}
	}
	t.Run("bounded", func(t *testing.T) {
		c := verifiedCache{maxBytes: 64 << 10}
		for i := range 10_000 {
			c.put(fmt.Sprintf("token-%d", i), "k1", key, id(i), time.Time{}, now)
			if c.bytes > c.maxBytes {
				t.Fatalf("after %d tokens: %d bytes, bound %d", i+1, c.bytes, c.maxBytes)
			}
		}
		if _, ok := c.get("token-9999", now); !ok {
			t.Error("the newest token was evicted")
		}
		sum := 0
		for _, e := range c.entries {
			sum += e.size
		}
		if sum != c.bytes {
			t.Errorf("bytes = %d, entries hold %d", c.bytes, sum)
		}
	})
	t.Run("estimate", func(t *testing.T) {
		const n = 20_000
		raws := make([]string, n)
		for i := range n {
			raws[i] = fmt.Sprintf("token-%d", i)
		}
		c := verifiedCache{maxBytes: 1 << 30}
		before := heapInUse()
		for i := range n {
			c.put(raws[i], "k1", key, id(i), time.Time{}, now)
		}
		grew := heapInUse() - before
		runtime.KeepAlive(&c)
		if grew > int64(c.bytes) {
			t.Errorf("%d entries took %d bytes of heap; the cache counted %d (%d per entry): raise entryOverhead",
				n, grew, c.bytes, c.bytes/n)
		}
		t.Logf("%d entries: %d bytes of heap, %d counted", n, grew, c.bytes)
	})
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func TestVerifyRemembersAToken(t *testing.T) {
	v, keys := cacheVerifier(t)
	priv := newKey(t)
	keys.publish("k1", priv)
	raw := signES256(t, priv, "k1", time.Now().Add(time.Hour))
	first, err := v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	if !cached(v, raw) {
		t.Fatal("a verified token was not remembered")
	}
	again, err := v.Verify(context.Background(), raw)
	if err != nil || again.Subject != first.Subject || again.Org != first.Org {
		t.Fatalf("second Verify = %+v, %v; want %+v", again, err, first)
	}
}

// A token that differs in one byte from a remembered one is checked in
// full: wherever the byte is, the signature no longer matches.
func TestVerifyCachedTokenDifferingInOneByte(t *testing.T) {
	v, _, raw := verifiedToken(t)
	for _, at := range []int{len(raw) / 2, len(raw) - 3} { // the payload, the signature
		b := []byte(raw)
		if b[at] == 'A' {
			b[at] = 'B'
		} else {
			b[at] = 'A'
		}
		if _, err := v.Verify(context.Background(), string(b)); err == nil {
			t.Errorf("a token changed at byte %d of %d was accepted", at, len(raw))
		}
	}
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Errorf("the original token: %v", err)
	}
}

// A remembered token stops counting once its key leaves the issuer's key
// set, or its kid names another key.
func TestVerifyCachedTokenAfterKeyChanges(t *testing.T) {
	t.Run("kid withdrawn", func(t *testing.T) {
		v, keys, raw := verifiedToken(t)
		keys.withdraw("k1")
		_, err := v.Verify(context.Background(), raw)
		if err == nil {
			t.Fatal("a token whose key was withdrawn was accepted from the cache")
		}
		if cached(v, raw) {
			t.Error("the token is still remembered")
		}
	})
	t.Run("kid reused for another key", func(t *testing.T) {
		v, keys, raw := verifiedToken(t)
		keys.publish("k1", newKey(t))
		if _, err := v.Verify(context.Background(), raw); err == nil {
			t.Fatal("a token whose kid now names another key was accepted")
		}
	})
	t.Run("other keys rotate", func(t *testing.T) {
		v, keys, raw := verifiedToken(t)
		keys.publish("k2", newKey(t))
		if _, err := v.Verify(context.Background(), raw); err != nil || !cached(v, raw) {
			t.Fatalf("a token whose key is still published: %v (cached %v)", err, cached(v, raw))
		}
	})
}

// A token without a kid is checked against every key, each time.
func TestVerifyDoesNotRememberKidlessTokens(t *testing.T) {
	v, keys := cacheVerifier(t)
	priv := newKey(t)
	keys.publish("k1", priv)
	raw := signES256(t, priv, "", time.Now().Add(time.Hour))
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	if cached(v, raw) {
		t.Error("a kid-less token was remembered")
	}
}

// BenchmarkVerify: a token checked in full (ES256) against one remembered.
func BenchmarkVerify(b *testing.B) {
	v, keys := cacheVerifier(b)
	priv := newKey(b)
	keys.publish("k1", priv)
	raw := signES256(b, priv, "k1", time.Now().Add(time.Hour))
	ctx := context.Background()
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v.verified.remove(raw)
			if _, err := v.Verify(ctx, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(ctx, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

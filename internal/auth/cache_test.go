package auth

import (
	"testing"
	"time"
)

func TestVerifiedCacheNeverOutlivesTheToken(t *testing.T) {
	now := time.Now()
	var c verifiedCache
	c.put("short", Identity{Subject: "a", Expiry: now.Add(time.Second)}, now)
	c.put("long", Identity{Subject: "b", Expiry: now.Add(time.Hour)}, now)
	cases := []struct {
		raw  string
		at   time.Duration
		want bool
	}{
		{"short", 500 * time.Millisecond, true},
		{"short", time.Second, false}, // at exp: expired
		{"long", 59 * time.Second, true},
		{"long", cacheTTL, false}, // at most cacheTTL, though exp is later
		{"unknown", 0, false},
	}
	for _, tc := range cases {
		if _, ok := c.get(tc.raw, now.Add(tc.at)); ok != tc.want {
			t.Errorf("get(%q) after %s = %v, want %v", tc.raw, tc.at, ok, tc.want)
		}
	}
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	now := time.Now()
	var c verifiedCache
	for i := 0; i < cacheEntries+10; i++ {
		c.put(string(rune(i))+"tok", Identity{Expiry: now.Add(time.Hour)}, now)
	}
	if n := len(c.entries); n > cacheEntries {
		t.Fatalf("%d entries, bound %d", n, cacheEntries)
	}
}

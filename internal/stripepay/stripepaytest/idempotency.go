package stripepaytest

// maxStoredKeys bounds the saved responses. Stripe keeps a key for at least
// 24 hours; a long benchmark would then hold every response it ever got
// (stripe-go sends a fresh key with every POST, previews included), so the
// fake forgets the oldest saved keys beyond this many.
const maxStoredKeys = 100_000

// keyStore holds what Stripe's idempotency layer holds: per key, the
// request it was first used with and, once that request has executed, its
// response. It is guarded by Server.mu.
type keyStore struct {
	max     int
	entries map[string]*keyEntry
	saved   []string // keys with a saved response, oldest first
}

type keyEntry struct {
	fingerprint string // method, path and parameters of the first request
	done        bool   // false while the first request is in flight
	res         result
}

func newKeyStore(max int) keyStore {
	return keyStore{max: max, entries: map[string]*keyEntry{}}
}

// claim decides what to do with a request carrying key. It returns
// proceed=true when the request should execute (the key is then in flight
// until finish), or else the response to send instead: the saved one,
// replayed; a 400 if the key was first used for a different request; a 409
// if the first request is still in flight.
func (ks *keyStore) claim(key, fingerprint string) (res result, proceed bool) {
	e, ok := ks.entries[key]
	switch {
	case !ok:
		ks.entries[key] = &keyEntry{fingerprint: fingerprint}
		return result{}, true
	case e.fingerprint != fingerprint:
		return errorResult(errKeyReused()), false
	case !e.done:
		return errorResult(errKeyInUse()), false
	default:
		replay := e.res
		replay.replayed = true
		return replay, false
	}
}

// finish ends the in-flight request of key. A response the endpoint
// produced is saved for replay; a refusal before execution (invalid
// parameters) is not, so a corrected retry with the same key can run, as
// with Stripe.
func (ks *keyStore) finish(key string, res result) {
	if !res.save {
		delete(ks.entries, key)
		return
	}
	e, ok := ks.entries[key]
	if !ok {
		return
	}
	e.done, e.res = true, res
	ks.saved = append(ks.saved, key)
	if len(ks.saved) > ks.max {
		delete(ks.entries, ks.saved[0])
		ks.saved = ks.saved[1:]
	}
}

func (s *Server) claimKey(key, fingerprint string) (result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys.claim(key, fingerprint)
}

func (s *Server) finishKey(key string, res result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys.finish(key, res)
}

// InFlight is the number of requests with an idempotency key that are
// executing (or held by a Stall fault).
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.keys.entries {
		if !e.done {
			n++
		}
	}
	return n
}

package billing

import (
	"time"
)

// RateLimits bound how fast one principal may ask for tokens and fail second
// calls. Counts come from the audit log in the shared database, so the limits
// hold across replicas; under concurrent requests a principal can overshoot
// a limit by the number of requests in flight.
type RateLimits struct {
	Window time.Duration
	// Proposals is the most first calls (tokens issued) per Window; 0: no limit.
	Proposals int
	// FailedConfirms is the most rejected second calls per Window; 0: no limit.
	FailedConfirms int
}

// Activity is a principal's recent handshake activity, from the audit log.
type Activity struct {
	Issued, Rejected             int
	OldestIssued, OldestRejected time.Time // within the window
	Now                          time.Time // the database's
}

// limit is one of the two rate limits.
type limit int

const (
	limitProposals limit = iota
	limitFailedConfirms
)

// allowed is the limit's count per window; 0: no limit.
func (s *Service) allowed(which limit) int {
	if which == limitFailedConfirms {
		return s.limits.FailedConfirms
	}
	return s.limits.Proposals
}

// activityWindow is how far back the caller's activity is read for the
// limit: 0, nothing to read, when the limit is off. A first call reads it
// with the account, in one round trip (Store.AccountForCall).
func (s *Service) activityWindow(which limit) time.Duration {
	if s.allowed(which) <= 0 {
		return 0
	}
	return s.limits.Window
}

// checkRate refuses the call when the caller used up the limit, by its
// activity a read over activityWindow(which).
func (s *Service) checkRate(a Activity, which limit) error {
	allowed := s.allowed(which)
	if allowed <= 0 {
		return nil
	}
	count, oldest := a.Issued, a.OldestIssued
	message := "too many confirmation requests; retry later"
	if which == limitFailedConfirms {
		count, oldest = a.Rejected, a.OldestRejected
		message = "too many failed confirmations; retry later"
	}
	if count < allowed {
		return nil
	}
	// The window slides: a slot frees when the oldest counted call leaves it.
	wait := oldest.Add(s.limits.Window).Sub(a.Now)
	return &Error{Code: CodeRateLimited, Message: message, RetryAfter: max(wait, time.Second)}
}

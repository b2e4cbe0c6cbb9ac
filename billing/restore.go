package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Putting back, durably, a scheduled change a change not made released
// (contract §6).
//
// A change made now that cancels a scheduled change releases the schedule
// first. If the change is then recorded as not made (declined, refused,
// consent lapsed, not applied), billingd schedules the released change
// again (restoreScheduled). When that first attempt fails (Stripe 5xx, 429,
// a timeout, or the read-back before it), the transaction that records the
// change not made also records that the confirmation owes the restore
// (RestoreDebt), and the answer says the scheduled change will be put back.
// Every replica's settler (RestoreReleasedChanges) then tries again, one
// transaction each under the subscription's lock, until it is put back or
// no longer wanted: Stripe has a scheduled change again, another change was
// executed since (the person's newer decision), the plan moved, or the
// date is too near (datePassed). After restoreTries failed rounds billingd
// gives up and logs it as an error.
//
// What a reader sees meanwhile (at most restoreTries settle rounds): the
// subscription without the scheduled change, as Stripe has it. A first
// call quotes from that state; if the restore lands before its second
// call, the subscription's version moved and the second call refuses the
// token as drift (nothing is executed against a state the quote did not
// show); if the person executes a change first, that newer decision settles
// the debt and nothing is put back.

// restoreTries bounds the settler's attempts at one restore.
const restoreTries = 5

// Why a restore is no longer owed (restore_settled).
const (
	restoreDone            = "restored"
	restoreScheduledAgain  = "scheduled_at_provider"
	restoreOpaque          = "schedule_changed_elsewhere"
	restorePlanMoved       = "plan_changed"
	restoreChangedSince    = "changed_since"
	restoreDatePassed      = "date_passed"
	restoreGaveUp          = "gave_up"
	restoreSettledNoReason = ""
)

// RestoreDebt is what a confirmation owes of putting back the scheduled
// change its first step released.
type RestoreDebt struct {
	// Owed: not put back yet, and still wanted as far as billingd knows.
	Owed bool
	// Tries counts the settler's attempts so far.
	Tries int
	// Since is when it became owed (the database's clock).
	Since time.Time
	// Settled is why it is no longer owed, once it is not.
	Settled string
}

// restoreOutcome is what became of a released scheduled change once the
// change that released it was not made.
type restoreOutcome int

const (
	restoreLost     restoreOutcome = iota // not put back, and will not be
	restoreRestored                       // scheduled again now
	restoreOwed                           // owed: the settler puts it back
)

// restorable reports whether sc, released by a change not made, can be
// scheduled again by billingd at now: it was made through billingd (its
// schedule named its confirmation) and its date is not too near.
func (s *Service) restorable(sc *ScheduledChange, now time.Time) bool {
	return sc != nil && sc.ConfirmationID != "" && sc.PriceID != "" && !s.datePassed(Terms{Cancels: sc}, now)
}

// putBack schedules again the change c's first step released, with state
// the provider's subscription without it; if that fails it records, in tx
// (the transaction recording c not made), that the restore is owed.
func (s *Service) putBack(ctx context.Context, tx Tx, c Confirmation, acct Account, now time.Time,
	state *ProviderSubscription) (restoreOutcome, error) {
	if !s.restorable(c.Terms.Cancels, now) {
		return restoreLost, nil
	}
	if err := s.restoreScheduled(ctx, c, acct, state, restoreKey(c, 0, now)); err == nil {
		return restoreRestored, nil
	}
	return restoreOwed, s.oweRestore(ctx, tx, c)
}

// oweRestore records that c owes back the scheduled change it released.
func (s *Service) oweRestore(ctx context.Context, tx Tx, c Confirmation) error {
	err := tx.Record(ctx, Record{ConfirmationID: c.ID, Restore: &RestoreDebt{Owed: true}})
	if err != nil {
		return fmt.Errorf("record restore owed: %w", err)
	}
	return nil
}

// restoreKey is the idempotency key of attempt n, at now, at putting back
// what c released. Each attempt follows a read-back that found it released
// and is a request of its own: Stripe replays a saved 5xx for 24 hours
// under one key, and a key reused after a restore whose recording was lost
// (the process killed, the database restarted) and a resend that released
// it again would replay the first restore's success on a released schedule.
func restoreKey(c Confirmation, n int, now time.Time) string {
	return fmt.Sprintf("%s:restore-%d-%d", idempotencyKey(c), n, now.UnixMicro())
}

// RestoreReleasedChanges tries again to put back the scheduled changes
// owed by changes not made, one transaction each, and returns how many it
// looked at. Every replica may run it: a confirmation another one holds is
// skipped, and one whose attempt fails does not hold up the others.
func (s *Service) RestoreReleasedChanges(ctx context.Context, limit int) (int, error) {
	n := 0
	var seen []string
	for ; n < limit; n++ {
		found, locked := true, ""
		busy, err := s.admittedExecutionTx(ctx, func(tx Tx) error {
			c, acct, now, err := tx.LockOwedRestore(ctx, seen)
			if errors.Is(err, ErrNotFound) {
				found = false
				return nil
			}
			if err != nil {
				return fmt.Errorf("lock owed restore: %w", err)
			}
			seen = append(seen, c.ID)
			locked = c.ID
			return s.retryRestore(ctx, tx, c, acct, now)
		})
		if err != nil && locked != "" {
			s.log.Warn("putting back a released scheduled change failed; will retry", "confirmation_id", locked, "err", err)
			continue
		}
		if err != nil {
			return n, storeError("restore released scheduled change", err)
		}
		if busy || !found {
			return n, nil
		}
	}
	return n, nil
}

// retryRestore is one attempt at putting back what c released: the
// subscription is read back at the provider, and the change scheduled
// again unless it is no longer wanted (restoreMoot).
func (s *Service) retryRestore(ctx context.Context, tx Tx, c Confirmation, acct Account, now time.Time) error {
	debt := RestoreDebt{Owed: true, Tries: c.Restore.Tries + 1}
	state, err := s.readBack(ctx, acct)
	if err != nil {
		return s.restoreFailed(ctx, tx, c, debt, err)
	}
	why, err := s.restoreMoot(ctx, tx, c, acct, state, now)
	if err != nil {
		return err
	}
	if why != restoreSettledNoReason {
		// billingd's copy may still show the change (the read-back after
		// the refusal failed): it is recorded as the provider has it.
		s.log.Info("a released scheduled change is no longer owed", "confirmation_id", c.ID, "why", why)
		if err := s.settleRestore(ctx, tx, c, debt, why); err != nil {
			return err
		}
		_, err = s.recordProviderState(ctx, tx, acct, state, time.Time{})
		return err
	}
	if err := s.restoreScheduled(ctx, c, acct, &state, restoreKey(c, debt.Tries, now)); err != nil {
		return s.restoreFailed(ctx, tx, c, debt, err)
	}
	if err := s.settleRestore(ctx, tx, c, debt, restoreDone); err != nil {
		return err
	}
	_, err = s.recordProviderState(ctx, tx, acct, state, time.Time{})
	return err
}

// restoreMoot says why putting back what c released is no longer wanted,
// "" if it still is.
func (s *Service) restoreMoot(ctx context.Context, tx Tx, c Confirmation, acct Account, state ProviderSubscription,
	now time.Time) (string, error) {
	switch {
	case state.Schedule != nil && state.Schedule.Opaque:
		return restoreOpaque, nil
	case s.scheduledFrom(state) != nil:
		return restoreScheduledAgain, nil
	case !state.on(c.Terms.FromPriceID, c.Terms.seatsFrom()):
		return restorePlanMoved, nil
	case !s.restorable(c.Terms.Cancels, now):
		return restoreDatePassed, nil
	}
	window := now.Sub(c.Restore.Since)
	if c.Restore.Since.IsZero() || window < 0 {
		window = 0
	}
	executed, err := tx.ExecutedSince(ctx, c.Org, window)
	if err != nil {
		return "", fmt.Errorf("count changes since the restore was owed: %w", err)
	}
	if executed > 0 {
		return restoreChangedSince, nil
	}
	return restoreSettledNoReason, nil
}

// restoreFailed records a failed attempt; after restoreTries of them the
// restore is given up, loudly.
func (s *Service) restoreFailed(ctx context.Context, tx Tx, c Confirmation, debt RestoreDebt, cause error) error {
	if debt.Tries < restoreTries {
		s.log.Warn("putting back a released scheduled change failed; will retry", "confirmation_id", c.ID,
			"tries", debt.Tries, "err", cause)
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Restore: &debt}); err != nil {
			return fmt.Errorf("record restore attempt: %w", err)
		}
		return nil
	}
	s.log.Error("gave up putting back a released scheduled change", "confirmation_id", c.ID,
		"scheduled_by", c.Terms.Cancels.ConfirmationID, "tries", debt.Tries, "err", cause)
	return s.settleRestore(ctx, tx, c, debt, restoreGaveUp)
}

// settleRestore records that c no longer owes a restore, and why.
func (s *Service) settleRestore(ctx context.Context, tx Tx, c Confirmation, debt RestoreDebt, why string) error {
	debt.Owed, debt.Settled = false, why
	if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Restore: &debt}); err != nil {
		return fmt.Errorf("record restore settled: %w", err)
	}
	return nil
}

package app

import (
	"context"
	"time"
)

// settleBatch bounds how many unknown outcomes one round settles, so a long
// Stripe outage never turns a round into an unbounded loop.
const settleBatch = 100

// RunSettle settles plan changes whose Stripe outcome is unknown every
// SETTLE_INTERVAL until ctx ends. Every replica runs it; the database hands
// each unsettled confirmation to one replica at a time. A change whose
// answer was lost and whose client never retried is recorded here. It
// also reads back subscriptions whose scheduled change is due, so that a
// change Stripe made at its renewal shows without a webhook, and rejects
// changes whose approvals did not come within their window. With traces
// on, each of its rounds is a trace of its own, whose step spans name the
// confirmation they act on (billingd.confirmation_id).
func (a *App) RunSettle(ctx context.Context) {
	every(ctx, a.Config.SettleInterval, func() {
		a.SettleOnce(ctx)
		a.SyncScheduledOnce(ctx)
		a.RestoreOnce(ctx)
		a.ExpireApprovalsOnce(ctx)
	})
}

// ExpireApprovalsOnce rejects (reason expired) the changes still waiting
// for approvals when their window ended, and returns how many: fail
// closed, on every replica, from the database alone.
func (a *App) ExpireApprovalsOnce(ctx context.Context) int {
	ctx, end := a.tracing.Round(ctx, "expire approvals")
	defer end()
	n, err := a.Service.ExpireApprovals(ctx, settleBatch)
	if err != nil {
		a.Log.WarnContext(ctx, "rejecting expired approvals failed; will retry", "err", err)
	}
	if n > 0 {
		a.Log.InfoContext(ctx, "rejected changes whose approval window ended", "count", n)
	}
	return n
}

// RestoreOnce tries again to put back scheduled changes that changes not
// made released (contract §6) and returns how many it looked at.
func (a *App) RestoreOnce(ctx context.Context) int {
	ctx, end := a.tracing.Round(ctx, "restore released changes")
	defer end()
	n, err := a.Service.RestoreReleasedChanges(ctx, settleBatch)
	if err != nil {
		a.Log.WarnContext(ctx, "putting back released scheduled changes failed; will retry", "err", err)
	}
	return n
}

// SyncScheduledOnce records what Stripe made of scheduled changes due for
// at least SETTLE_INTERVAL (webhooks usually tell sooner) and returns how
// many subscriptions it read back.
func (a *App) SyncScheduledOnce(ctx context.Context) int {
	ctx, end := a.tracing.Round(ctx, "sync scheduled changes")
	defer end()
	n, err := a.Service.SyncScheduledChanges(ctx, a.Config.SettleInterval, settleBatch)
	if err != nil {
		a.Log.WarnContext(ctx, "syncing scheduled changes failed; will retry", "err", err)
	}
	return n
}

// every runs fn each time interval passes, until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		fn()
	}
}

// SettleOnce settles the unknown outcomes left alone for at least
// SETTLE_INTERVAL and returns how many it looked at.
func (a *App) SettleOnce(ctx context.Context) int {
	ctx, end := a.tracing.Round(ctx, "settle unknown outcomes")
	defer end()
	n, err := a.Service.SettleUnknownOutcomes(ctx, a.Config.SettleInterval, settleBatch)
	if err != nil {
		a.Log.WarnContext(ctx, "settling unknown outcomes failed; will retry", "err", err)
	}
	if n > 0 {
		a.Log.InfoContext(ctx, "settled unknown outcomes", "count", n)
	}
	return n
}

package app

import (
	"context"
	"time"
)

// purgeBatch keeps each DELETE short, so purging never holds many row locks
// or competes with the hot path for long.
const purgeBatch = 500

// RunPurge removes finished and expired confirmations older than
// PURGE_RETENTION every PURGE_INTERVAL until ctx ends.
func (a *App) RunPurge(ctx context.Context) {
	a.PurgeOnce(ctx)
	every(ctx, a.Config.PurgeInterval, func() { a.PurgeOnce(ctx) })
}

// PurgeOnce deletes in batches until nothing old is left (or ctx ends) and
// returns how many confirmations it removed. Expired sign-ins and page
// sessions are purged in a loop of their own, until none are left, whether
// or not any confirmation was.
func (a *App) PurgeOnce(ctx context.Context) int64 {
	ctx, end := a.tracing.Round(ctx, "purge")
	defer end()
	total := purgeAll(ctx, a, "confirmations", func() (int64, error) {
		return a.Store.PurgeFinished(ctx, a.Config.PurgeRetention, purgeBatch)
	})
	purgeAll(ctx, a, "sign-ins and sessions", func() (int64, error) { return a.Store.PurgeSignIns(ctx, purgeBatch) })
	return total
}

// purgeAll calls purge, which deletes at most purgeBatch rows of a kind,
// until it deletes fewer, and returns the sum.
func purgeAll(ctx context.Context, a *App, what string, purge func() (int64, error)) int64 {
	var total int64
	for ctx.Err() == nil {
		n, err := purge()
		if err != nil {
			a.Log.WarnContext(ctx, "purge failed; will retry", "what", what, "err", err)
			break
		}
		total += n
		if n < purgeBatch {
			break
		}
		time.Sleep(10 * time.Millisecond) // let the hot path in between batches
	}
	if total > 0 {
		a.Log.InfoContext(ctx, "purged", "what", what, "count", total)
	}
	return total
}

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
// returns how many confirmations it removed.
func (a *App) PurgeOnce(ctx context.Context) int64 {
	var total int64
	for ctx.Err() == nil {
		n, err := a.Store.PurgeFinished(ctx, a.Config.PurgeRetention, purgeBatch)
		if err != nil {
			a.Log.Warn("purge failed; will retry", "err", err)
			break
		}
		total += n
		if n < purgeBatch {
			break
		}
		time.Sleep(10 * time.Millisecond) // let the hot path in between batches
	}
	if total > 0 {
		a.Log.Info("purged confirmations", "count", total)
	}
	return total
}

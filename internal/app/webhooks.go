package app

import (
	"context"

	"github.com/billingd/billingd/internal/webhooks"
)

// newWebhooks wires outbound webhooks: the endpoints' management for the
// REST API and this replica's deliverer.
func (a *App) newWebhooks() {
	store := a.Store.Webhooks()
	guard := webhooks.Guard{AllowPrivate: a.Config.Webhooks.AllowPrivateNetworks}
	a.Endpoints = &webhooks.Endpoints{Store: store, Guard: guard, People: a.Service}
	observed := a.Metrics.ObserveWebhooks(store.OldestPending, a.Log)
	w := a.Config.Webhooks
	a.Deliverer = &webhooks.Deliverer{Store: store, Links: a.Service, Guard: guard, Timeout: w.Timeout,
		Schedule: w.RetrySchedule, Workers: w.Workers, Poll: w.PollInterval, Log: a.Log,
		Observe: observed.ObserveDelivery}
}

// RunWebhooks delivers outbound webhooks until ctx ends. Every replica runs
// it; the outbox's leases hand each delivery to one replica at a time.
func (a *App) RunWebhooks(ctx context.Context) {
	a.Deliverer.Run(ctx)
}

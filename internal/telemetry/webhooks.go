package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WebhookMetrics measures outbound webhooks (internal/webhooks).
type WebhookMetrics struct {
	deliveries *prometheus.CounterVec
}

// ObserveWebhooks registers the outbound webhook metrics: attempts by
// outcome, counted as they end, and the age of the oldest pending delivery,
// asked of oldest (the database) at each scrape, so that every replica
// reports the one outbox they share.
func (m *Metrics) ObserveWebhooks(oldest func(context.Context) (time.Duration, error), log *slog.Logger) *WebhookMetrics {
	w := &WebhookMetrics{deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "billingd_webhook_deliveries_total",
		Help: "Outbound webhook delivery attempts by outcome: delivered, retrying (to be sent again), failed (given up).",
	}, []string{"outcome"})}
	for _, o := range []string{"delivered", "retrying", "failed"} {
		w.deliveries.WithLabelValues(o) // present at 0 from the start
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "billingd_webhook_outbox_oldest_pending_seconds",
		Help: "Age of the oldest outbound webhook delivery not yet delivered or failed (0: none); -1 when the database did not answer.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		d, err := oldest(ctx)
		if err != nil {
			log.Warn("reading the webhook outbox's age failed", "err", err)
			return -1
		}
		return d.Seconds()
	})
	m.registry.MustRegister(w.deliveries, age)
	return w
}

// ObserveDelivery counts one attempt's outcome.
func (w *WebhookMetrics) ObserveDelivery(outcome string) {
	w.deliveries.WithLabelValues(outcome).Inc()
}

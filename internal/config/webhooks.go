package config

import (
	"strings"
	"time"
)

// Webhooks configures outbound webhooks (contract §10; internal/webhooks).
type Webhooks struct {
	// AllowPrivateNetworks (WEBHOOK_ALLOW_PRIVATE_NETWORKS, contract §3)
	// lets endpoints be http and resolve to loopback or private addresses:
	// tests and billingd dev. Off, such endpoints are refused (SSRF).
	AllowPrivateNetworks bool
	// Timeout (WEBHOOK_TIMEOUT, 1s–60s, default 10s) bounds one delivery
	// attempt, connection included.
	Timeout time.Duration
	// RetrySchedule (WEBHOOK_RETRY_SCHEDULE, comma-separated durations)
	// is the wait after each failed attempt; after the last, the delivery
	// is failed. Empty: 5s,5m,30m,2h,5h,10h,10h (over 24 hours).
	RetrySchedule []time.Duration
	// Workers (WEBHOOK_WORKERS, 1–256, default 8) bounds the attempts one
	// replica has in flight.
	Workers int
	// PollInterval (WEBHOOK_POLL_INTERVAL, 100ms–1m, default 1s) is how
	// often each replica looks for due deliveries.
	PollInterval time.Duration
}

func webhooksConfig(getenv func(string) string, fail func(string, string, ...any)) Webhooks {
	w := Webhooks{
		AllowPrivateNetworks: boolean(getenv, "WEBHOOK_ALLOW_PRIVATE_NETWORKS", false, fail),
		Timeout:              duration(getenv, "WEBHOOK_TIMEOUT", 10*time.Second, time.Second, time.Minute, fail),
		Workers:              between(getenv, "WEBHOOK_WORKERS", 8, 1, 256, fail),
		PollInterval:         duration(getenv, "WEBHOOK_POLL_INTERVAL", time.Second, 100*time.Millisecond, time.Minute, fail),
	}
	for _, part := range splitList(getenv("WEBHOOK_RETRY_SCHEDULE")) {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d < 100*time.Millisecond || d > 48*time.Hour {
			fail("WEBHOOK_RETRY_SCHEDULE", "want comma-separated durations from 100ms to 48h, got %q", part)
			return w
		}
		w.RetrySchedule = append(w.RetrySchedule, d)
	}
	return w
}

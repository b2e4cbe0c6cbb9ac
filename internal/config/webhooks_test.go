package config

import (
	"reflect"
	"testing"
	"time"
)

func TestLoadWebhooks(t *testing.T) {
	c := load(t, nil)
	want := Webhooks{Timeout: 10 * time.Second, Workers: 8, PollInterval: time.Second}
	if !reflect.DeepEqual(c.Webhooks, want) {
		t.Errorf("defaults %+v, want %+v (no private networks; the deliverer's own schedule)", c.Webhooks, want)
	}
	c = load(t, map[string]string{"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "WEBHOOK_TIMEOUT": "2s",
		"WEBHOOK_RETRY_SCHEDULE": "1s, 1m,2h", "WEBHOOK_WORKERS": "3", "WEBHOOK_POLL_INTERVAL": "250ms"})
	want = Webhooks{AllowPrivateNetworks: true, Timeout: 2 * time.Second, Workers: 3, PollInterval: 250 * time.Millisecond,
		RetrySchedule: []time.Duration{time.Second, time.Minute, 2 * time.Hour}}
	if !reflect.DeepEqual(c.Webhooks, want) {
		t.Errorf("set %+v, want %+v", c.Webhooks, want)
	}
	_, err := Load(env(map[string]string{"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "sometimes", "WEBHOOK_TIMEOUT": "5m",
		"WEBHOOK_RETRY_SCHEDULE": "5s,soon", "WEBHOOK_WORKERS": "0", "WEBHOOK_POLL_INTERVAL": "1ms"}))
	for _, v := range []string{"WEBHOOK_ALLOW_PRIVATE_NETWORKS", "WEBHOOK_TIMEOUT", "WEBHOOK_RETRY_SCHEDULE",
		"WEBHOOK_WORKERS", "WEBHOOK_POLL_INTERVAL"} {
		wantInvalid(t, err, v)
	}
}

-- The purge job deletes processed Stripe event ids by age.
CREATE INDEX stripe_events_received_idx ON stripe_events (received_at);

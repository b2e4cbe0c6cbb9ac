DROP INDEX IF EXISTS stripe_events_received_idx;

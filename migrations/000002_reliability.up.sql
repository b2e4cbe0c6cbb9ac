-- Purging finished and expired confirmations scans by the time a row stopped
-- being redeemable: its finish time, or its expiry for one never finished.
CREATE INDEX confirmations_purge_idx ON confirmations ((coalesce(finished_at, expires_at)));

-- Rate limits count a principal's recent issued tokens and rejected second
-- calls from the audit log itself, so every replica sees the same counts.
CREATE INDEX audit_events_rate_idx ON audit_events (org, principal, at)
    WHERE event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED');

-- Stripe webhook events already processed, for deduplication by event id.
CREATE TABLE stripe_events (
    id          text PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- A webhook may revoke pending confirmations whose summary no longer holds.
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired', 'revoked'));

-- The creation time of the last Stripe event applied to the subscription:
-- Stripe does not deliver events in order, and an older snapshot must not
-- overwrite a newer one.
ALTER TABLE subscriptions ADD COLUMN synced_at timestamptz;

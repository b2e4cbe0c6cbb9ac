ALTER TABLE subscriptions DROP COLUMN IF EXISTS synced_at;
UPDATE confirmations SET status = 'invalidated' WHERE status = 'revoked';
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired'));
DROP TABLE IF EXISTS stripe_events;
DROP INDEX IF EXISTS audit_events_rate_idx;
DROP INDEX IF EXISTS confirmations_purge_idx;

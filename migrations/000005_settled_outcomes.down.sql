DROP INDEX IF EXISTS audit_events_rate_idx;
CREATE INDEX audit_events_rate_idx ON audit_events (org, principal, at)
    WHERE event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED');
DROP INDEX IF EXISTS confirmations_attempted_idx;
DROP INDEX IF EXISTS confirmations_executing_idx;
-- An unsettled change cannot be represented any more: leave it to an operator
-- as failed rather than pending (it must never execute again).
UPDATE confirmations SET status = 'failed' WHERE status = 'executing';
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired', 'revoked', 'rejected'));
ALTER TABLE confirmations DROP COLUMN IF EXISTS result;
ALTER TABLE confirmations DROP COLUMN IF EXISTS agent;
ALTER TABLE confirmations DROP COLUMN IF EXISTS attempted_at;
ALTER TABLE confirmations DROP COLUMN IF EXISTS attempt;

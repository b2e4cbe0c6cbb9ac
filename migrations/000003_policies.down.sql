DROP INDEX IF EXISTS audit_events_executed_idx;
UPDATE confirmations SET status = 'invalidated' WHERE status = 'rejected';
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired', 'revoked'));
ALTER TABLE confirmations DROP COLUMN IF EXISTS approver;
ALTER TABLE confirmations DROP COLUMN IF EXISTS approval;
DROP TABLE IF EXISTS org_policies;

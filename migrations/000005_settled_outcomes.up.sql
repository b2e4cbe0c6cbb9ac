-- A confirmation whose Stripe outcome is unknown (timeout, 5xx, lost
-- answer) is 'executing' until billingd finds out from Stripe what happened.
-- attempt numbers the idempotency keys used for it: a replayed 5xx that left
-- the subscription unchanged is retried under the next key.
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executing', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired',
    'revoked', 'rejected'));
ALTER TABLE confirmations ADD COLUMN attempt integer NOT NULL DEFAULT 0;
-- When the last attempt at Stripe was made: the reconciler leaves recent
-- attempts to the owner's retry.
ALTER TABLE confirmations ADD COLUMN attempted_at timestamptz;
-- Whether the confirmation was issued to an agent: an agent's confirmation
-- stays an agent's on every channel.
ALTER TABLE confirmations ADD COLUMN agent boolean NOT NULL DEFAULT false;
-- The second call's answer, replayed to the owner who repeats it.
ALTER TABLE confirmations ADD COLUMN result jsonb;

-- The unsettled confirmations: one per org blocks other changes, and the
-- reconciler finds them by the age of their last attempt.
CREATE INDEX confirmations_executing_idx ON confirmations (org, attempted_at) WHERE status = 'executing';
CREATE INDEX confirmations_attempted_idx ON confirmations (attempted_at) WHERE status = 'executing';

-- Refused first calls (OPERATION_DENIED without a confirmation) count
-- against the issuance rate limit like issued tokens.
DROP INDEX audit_events_rate_idx;
CREATE INDEX audit_events_rate_idx ON audit_events (org, principal, at)
    WHERE event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED', 'OPERATION_DENIED');

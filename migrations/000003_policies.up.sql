-- Each org's confirmation policy (billing.Policy as JSON).
CREATE TABLE org_policies (
    org        text PRIMARY KEY REFERENCES orgs (id),
    policy     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL
);

-- Out-of-band approval of a confirmation: NULL when its policy did not ask
-- for one.
ALTER TABLE confirmations ADD COLUMN approval text CHECK (approval IN ('pending', 'granted', 'rejected'));
ALTER TABLE confirmations ADD COLUMN approver text;
ALTER TABLE confirmations DROP CONSTRAINT confirmations_status_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_status_check CHECK (status IN (
    'pending', 'executed', 'failed', 'superseded', 'cancelled', 'invalidated', 'expired', 'revoked', 'rejected'));

-- The daily limit counts an org's executed changes of the last day.
CREATE INDEX audit_events_executed_idx ON audit_events (org, at) WHERE event = 'OPERATION_EXECUTED';

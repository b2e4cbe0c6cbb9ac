-- Back to version 1 only. Events hashed with version 2 keep their hash, so
-- a chain containing them no longer verifies with an older billingd.
CREATE OR REPLACE FUNCTION audit_events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head audit_chain_heads%ROWTYPE;
BEGIN
    SELECT * INTO head FROM audit_chain_heads WHERE org = NEW.org FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_chain_heads (org, seq, hash) VALUES (NEW.org, 0, repeat('0', 64))
            ON CONFLICT (org) DO NOTHING;
        SELECT * INTO head FROM audit_chain_heads WHERE org = NEW.org FOR UPDATE;
    END IF;
    NEW.seq := head.seq + 1;
    NEW.prev_hash := head.hash;
    NEW.hash := audit_event_hash(NEW.prev_hash, NEW.org, NEW.seq, NEW.id, NEW.at, NEW.event, NEW.principal,
        NEW.client, NEW.operation, NEW.confirmation_id, NEW.outcome, NEW.reason, NEW.request_id);
    UPDATE audit_chain_heads SET seq = NEW.seq, hash = NEW.hash WHERE org = NEW.org;
    RETURN NEW;
END $$;
DROP FUNCTION audit_event_hash_v2(text, text, bigint, bigint, timestamptz, text, text, text, text, text, text, text, text, text);
ALTER TABLE audit_events DROP COLUMN receipt_sha256;

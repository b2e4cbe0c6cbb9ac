-- Back to 000011's trigger.
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
    NEW.receipt_sha256 := '';
    IF NEW.event = 'OPERATION_EXECUTED' THEN
        NEW.receipt_sha256 := coalesce((SELECT encode(sha256(convert_to(r.receipt, 'UTF8')), 'hex') FROM receipts r
            WHERE r.confirmation_id = NEW.confirmation_id AND r.org = NEW.org), '');
    END IF;
    IF NEW.receipt_sha256 = '' THEN
        NEW.hash := audit_event_hash(NEW.prev_hash, NEW.org, NEW.seq, NEW.id, NEW.at, NEW.event, NEW.principal,
            NEW.client, NEW.operation, NEW.confirmation_id, NEW.outcome, NEW.reason, NEW.request_id);
    ELSE
        NEW.hash := audit_event_hash_v2(NEW.prev_hash, NEW.org, NEW.seq, NEW.id, NEW.at, NEW.event, NEW.principal,
            NEW.client, NEW.operation, NEW.confirmation_id, NEW.outcome, NEW.reason, NEW.request_id,
            NEW.receipt_sha256);
    END IF;
    UPDATE audit_chain_heads SET seq = NEW.seq, hash = NEW.hash WHERE org = NEW.org;
    RETURN NEW;
END $$;
DROP FUNCTION audit_event_hash_v3(text, text, bigint, bigint, timestamptz, text, text, text, text, text, text, text, text, text, jsonb);
-- Events hashed with version 3 no longer verify once their consent is gone:
-- going down loses that evidence, as dropping any column does.
ALTER TABLE audit_events DROP COLUMN consent;
ALTER TABLE confirmations DROP COLUMN subtotal_cents, DROP COLUMN discount_cents, DROP COLUMN tax_cents,
    DROP COLUMN credit_applied_cents, DROP COLUMN consent;

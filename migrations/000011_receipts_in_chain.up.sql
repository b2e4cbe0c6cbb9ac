-- Receipts in the audit chain (issue 23): the chain's hash left the inline
-- receipt of an OPERATION_EXECUTED event out, so a receipt could be removed
-- from an export, or another put in its place, and the chain still
-- verified. From here on such an event carries receipt_sha256, the
-- lowercase hex SHA-256 of its receipt (the compact JWS's bytes), and its
-- hash is version 2 of the encoding, which is version 1's record with
-- receipt_sha256 appended:
--   "billingd-audit-v2", prev_hash, org, seq, id, at, event, principal,
--   client, operation, confirmation_id, outcome, reason, request_id,
--   receipt_sha256
-- Events without a receipt (every other event, and executed events written
-- before this migration) keep version 1, so every existing chain and export
-- still verifies. The Go verifier (internal/evidence) computes the same.
ALTER TABLE audit_events ADD COLUMN receipt_sha256 text NOT NULL DEFAULT '';

CREATE FUNCTION audit_event_hash_v2(prev_hash text, org text, seq bigint, id bigint, at timestamptz,
        event text, principal text, client text, operation text, confirmation_id text,
        outcome text, reason text, request_id text, receipt_sha256 text) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN encode(sha256(
        audit_chain_field('billingd-audit-v2') || audit_chain_field(prev_hash) || audit_chain_field(org) ||
        audit_chain_field(seq::text) || audit_chain_field(id::text) ||
        audit_chain_field(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) ||
        audit_chain_field(event) || audit_chain_field(principal) || audit_chain_field(client) ||
        audit_chain_field(operation) || audit_chain_field(confirmation_id) || audit_chain_field(outcome) ||
        audit_chain_field(reason) || audit_chain_field(request_id) || audit_chain_field(receipt_sha256)), 'hex');

-- The trigger binds the receipt itself, for every writer: an executed
-- event's receipt is stored in the same transaction, before the event
-- (internal/postgres queues the receipt first), and is read back here by
-- its primary key. A value a writer supplies for receipt_sha256 is
-- overwritten, like seq and hash.
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

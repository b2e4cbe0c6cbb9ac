-- Issue 21: every part of the amount, and how the person agreed.
--
-- A confirmation is bound to every part of the amount its summary states
-- (contract §6): the preview's subtotal, discount, tax and the customer
-- credit applied, beside amount_due_cents (what is charged now).
ALTER TABLE confirmations
    ADD COLUMN subtotal_cents       bigint NOT NULL DEFAULT 0,
    ADD COLUMN discount_cents       bigint NOT NULL DEFAULT 0,
    ADD COLUMN tax_cents            bigint NOT NULL DEFAULT 0,
    ADD COLUMN credit_applied_cents bigint NOT NULL DEFAULT 0,
    -- How the person agreed (contract §11), recorded with the attempt that
    -- sends the change, so that a change settled later by the reconciler or
    -- a webhook still says how it was agreed to.
    ADD COLUMN consent jsonb;

-- OPERATION_EXECUTED events carry the consent too, and it is part of the
-- chain: an event with a consent is hashed with version 3 of the record,
-- version 2's (000011: version 1's fields and receipt_sha256, '' when the
-- event has no receipt) followed by the consent's:
--   "billingd-audit-v3", prev_hash, org, seq, id, at, event, principal,
--   client, operation, confirmation_id, outcome, reason, request_id,
--   receipt_sha256, method, human_present, auth_time, acr, approved_by
-- each as in version 1 (000006); a consent field that is absent is the
-- empty string; auth_time is the text stored in the consent. Events without
-- a consent keep version 1 or 2, so existing chains verify as they did.
-- The Go verifier (internal/evidence) computes the same bytes.
ALTER TABLE audit_events ADD COLUMN consent jsonb;

CREATE FUNCTION audit_event_hash_v3(prev_hash text, org text, seq bigint, id bigint, at timestamptz,
        event text, principal text, client text, operation text, confirmation_id text,
        outcome text, reason text, request_id text, receipt_sha256 text, consent jsonb) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN encode(sha256(
        audit_chain_field('billingd-audit-v3') || audit_chain_field(prev_hash) || audit_chain_field(org) ||
        audit_chain_field(seq::text) || audit_chain_field(id::text) ||
        audit_chain_field(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) ||
        audit_chain_field(event) || audit_chain_field(principal) || audit_chain_field(client) ||
        audit_chain_field(operation) || audit_chain_field(confirmation_id) || audit_chain_field(outcome) ||
        audit_chain_field(reason) || audit_chain_field(request_id) || audit_chain_field(receipt_sha256) ||
        audit_chain_field(coalesce(consent->>'method', '')) ||
        audit_chain_field(coalesce(consent->>'human_present', '')) ||
        audit_chain_field(coalesce(consent->>'auth_time', '')) ||
        audit_chain_field(coalesce(consent->>'acr', '')) ||
        audit_chain_field(coalesce(consent->>'approved_by', ''))), 'hex');

-- 000011's trigger, with version 3 for events that carry a consent.
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
    IF NEW.consent IS NOT NULL THEN
        NEW.hash := audit_event_hash_v3(NEW.prev_hash, NEW.org, NEW.seq, NEW.id, NEW.at, NEW.event, NEW.principal,
            NEW.client, NEW.operation, NEW.confirmation_id, NEW.outcome, NEW.reason, NEW.request_id,
            NEW.receipt_sha256, NEW.consent);
    ELSIF NEW.receipt_sha256 = '' THEN
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

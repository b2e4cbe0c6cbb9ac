-- Evidence for disputes (contract §11): a hash-chained audit log, signed
-- receipts stored with their confirmation, the receipt signing key billingd
-- generates when none is configured, and the Stripe mode a token is bound to.

-- audit_event_hash is the chain's hash, version 1. The Go verifier
-- (internal/evidence) computes exactly the same bytes; keep them in step.
-- The record is a sequence of fields, each the 8-byte big-endian length of
-- its UTF-8 bytes followed by those bytes, in this order:
--   "billingd-audit-v1", prev_hash, org, seq, id, at, event, principal,
--   client, operation, confirmation_id, outcome, reason, request_id
-- seq and id in decimal; at in UTC as YYYY-MM-DDTHH:MM:SS.ffffffZ (six
-- fractional digits, PostgreSQL's precision). The hash is the lowercase hex
-- SHA-256 of the record; the first event of an org has 64 zeros as prev_hash.
CREATE FUNCTION audit_chain_field(v text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN int8send(octet_length(convert_to(v, 'UTF8'))::bigint) || convert_to(v, 'UTF8');

CREATE FUNCTION audit_event_hash(prev_hash text, org text, seq bigint, id bigint, at timestamptz,
        event text, principal text, client text, operation text, confirmation_id text,
        outcome text, reason text, request_id text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN encode(sha256(
        audit_chain_field('billingd-audit-v1') || audit_chain_field(prev_hash) || audit_chain_field(org) ||
        audit_chain_field(seq::text) || audit_chain_field(id::text) ||
        audit_chain_field(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) ||
        audit_chain_field(event) || audit_chain_field(principal) || audit_chain_field(client) ||
        audit_chain_field(operation) || audit_chain_field(confirmation_id) || audit_chain_field(outcome) ||
        audit_chain_field(reason) || audit_chain_field(request_id)), 'hex');

ALTER TABLE audit_events ADD COLUMN seq bigint, ADD COLUMN prev_hash text, ADD COLUMN hash text;

-- Existing events get their chain, per org in id order.
DO $$
DECLARE
    r          audit_events%ROWTYPE;
    chain_org  text;
    prev       text;
    n          bigint;
BEGIN
    FOR r IN SELECT * FROM audit_events ORDER BY org, id LOOP
        IF chain_org IS DISTINCT FROM r.org THEN
            chain_org := r.org; prev := repeat('0', 64); n := 0;
        END IF;
        n := n + 1;
        r.hash := audit_event_hash(prev, r.org, n, r.id, r.at, r.event, r.principal, r.client, r.operation,
            r.confirmation_id, r.outcome, r.reason, r.request_id);
        UPDATE audit_events SET seq = n, prev_hash = prev, hash = r.hash WHERE id = r.id;
        prev := r.hash;
    END LOOP;
END $$;

ALTER TABLE audit_events ALTER COLUMN seq SET NOT NULL, ALTER COLUMN prev_hash SET NOT NULL,
    ALTER COLUMN hash SET NOT NULL;
-- One event per position: a fork cannot be stored. Also the export's order.
CREATE UNIQUE INDEX audit_events_chain_idx ON audit_events (org, seq);

-- The head of each org's chain. Writers lock it, so the events of one org
-- are chained one after the other whatever connection or replica writes them.
CREATE TABLE audit_chain_heads (
    org  text PRIMARY KEY,
    seq  bigint NOT NULL,
    hash text NOT NULL
);
INSERT INTO audit_chain_heads (org, seq, hash)
    SELECT DISTINCT ON (org) org, seq, hash FROM audit_events ORDER BY org, seq DESC;

-- Every insert into audit_events, whatever statement makes it, is chained
-- here: its seq, prev_hash and hash are computed in the database under the
-- org's head row lock, held until the writing transaction ends. Values a
-- writer supplies for those columns are overwritten.
CREATE FUNCTION audit_events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER audit_events_chain BEFORE INSERT ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_chain();

-- The log is append-only for billingd; the chain shows it if anyone else
-- edits it.
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only';
END $$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();

-- The signed receipt of each executed confirmation (a compact JWS). Like the
-- audit log, receipts outlive the confirmations they describe (those are
-- purged), so no foreign key.
CREATE TABLE receipts (
    confirmation_id text PRIMARY KEY,
    org             text NOT NULL,
    principal       text NOT NULL,
    summary         text NOT NULL, -- the text the person saw; the receipt holds its hash
    receipt         text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- The Stripe mode (live or test) the token is bound to, like its other terms.
ALTER TABLE confirmations ADD COLUMN livemode boolean NOT NULL DEFAULT false;

-- The receipt signing key billingd generates when RECEIPT_SIGNING_KEYS is
-- unset: the first replica stores it and every replica uses the same one.
-- Production should supply its own keys (a database administrator can read
-- this one).
CREATE TABLE receipt_keys (
    name            text PRIMARY KEY,
    private_key_pem text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Outbound webhooks (contract §10): an org's endpoints, and an outbox of
-- deliveries written in the same transaction as the audit event they tell
-- of. Every replica's deliverer (internal/webhooks) claims due deliveries
-- and sends them outside any transaction.

CREATE TABLE webhook_endpoints (
    id                    text PRIMARY KEY,
    org                   text NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    url                   text NOT NULL,
    events                text[] NOT NULL,
    format                text NOT NULL DEFAULT 'standard' CHECK (format IN ('standard', 'slack')),
    -- whsec_…: billingd signs with it, so it is kept as it was shown.
    secret                text NOT NULL,
    -- The secret before the last rotation, still signing until
    -- previous_secret_until (24 hours after the rotation).
    previous_secret       text,
    previous_secret_until timestamptz,
    created_by            text NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_org_idx ON webhook_endpoints (org);

-- One row per (event, endpoint). A pending row is due at next_attempt_at;
-- a claim sets lease and moves next_attempt_at past the request's timeout,
-- so a replica killed mid-send leaves a row that is due again when its
-- lease ends, and no two replicas ever send one row at once.
CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text NOT NULL,
    endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    org             text NOT NULL,
    type            text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    data            jsonb NOT NULL,
    -- One event per key and endpoint (an expiry recorded by two audit
    -- events is told once).
    dedupe_key      text,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease           uuid,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    finished_at     timestamptz
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id DESC);
-- The deliveries in flight (claimed, not yet recorded), which a claim asks
-- about for each endpoint, without reading the endpoint's history.
CREATE INDEX webhook_deliveries_in_flight_idx ON webhook_deliveries (endpoint_id) WHERE status = 'pending' AND lease IS NOT NULL;
CREATE INDEX webhook_deliveries_finished_idx ON webhook_deliveries (finished_at) WHERE status <> 'pending';
CREATE UNIQUE INDEX webhook_deliveries_dedupe_idx ON webhook_deliveries (endpoint_id, dedupe_key);

-- webhook_outbox_from_audit turns an audit event into the outbound events
-- it means, one delivery per endpoint of the org that asked for the type.
-- It reads rows as JSON (to_jsonb) so that columns other migrations add
-- (audit details, approvals_required, approvers) are used when present and the
-- function still compiles when they are not. Every cast is guarded, so no
-- value an event holds makes it raise (it has no EXCEPTION block: that
-- would cost a subtransaction per event). An org without endpoints pays one
-- index probe; events of other types do not call it at all (WHEN).
CREATE FUNCTION webhook_outbox_from_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    details  jsonb := '{}';
    c        jsonb := '{}';
    types    text[];
    t        text;
    event_id text;
    given    integer;
    needed   integer;
    data     jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE org = NEW.org) THEN
        RETURN NULL;
    END IF;
    IF NEW.event IN ('TOKEN_ISSUED', 'OPERATION_EXECUTED') THEN
        SELECT to_jsonb(x) INTO c FROM confirmations x WHERE x.id = NEW.confirmation_id;
        c := coalesce(c, '{}');
    END IF;
    IF NEW.event LIKE 'APPROVAL\_%' THEN
        details := to_jsonb(NEW)->'details';
        details := CASE WHEN jsonb_typeof(details) = 'object' THEN details ELSE '{}' END;
    END IF;
    -- Which outbound types the event is.
    types := CASE NEW.event
        WHEN 'TOKEN_ISSUED' THEN CASE
            WHEN c->>'approval' = 'pending' THEN ARRAY['approval.requested']
            WHEN c->>'verify_required' = 'true' THEN ARRAY['verification.requested'] END
        WHEN 'APPROVAL_GRANTED' THEN ARRAY['approval.granted']
        WHEN 'APPROVAL_REJECTED' THEN CASE
            WHEN 'expired' IN (NEW.reason, details->>'reason') THEN ARRAY['approval.expired']
            ELSE ARRAY['approval.rejected'] END
        WHEN 'APPROVAL_EXPIRED' THEN ARRAY['approval.expired']
        WHEN 'OPERATION_EXECUTED' THEN CASE
            WHEN c->>'at_period_end' = 'true' THEN ARRAY['change.scheduled']
            ELSE ARRAY['change.executed'] END
            || CASE WHEN NEW.consent->>'method' = 'mandate' THEN ARRAY['mandate.used'] ELSE ARRAY[]::text[] END
        WHEN 'SCHEDULED_CHANGE_APPLIED' THEN ARRAY['change.executed']
        WHEN 'OPERATION_FAILED' THEN ARRAY['change.failed']
    END;
    -- Nothing more unless an endpoint of the org asked for one of them.
    IF types IS NULL OR NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE org = NEW.org AND events && types) THEN
        RETURN NULL;
    END IF;
    IF c = '{}' THEN
        SELECT to_jsonb(x) INTO c FROM confirmations x WHERE x.id = NEW.confirmation_id;
        c := coalesce(c, '{}');
    END IF;
    needed := CASE WHEN jsonb_typeof(c->'approvals_required') = 'number' THEN (c->>'approvals_required')::numeric::integer
        WHEN jsonb_typeof(details->'approvals_required') = 'number' THEN (details->>'approvals_required')::numeric::integer
        ELSE 1 END;
    given := CASE WHEN jsonb_typeof(details->'approvals_given') = 'number' THEN (details->>'approvals_given')::numeric::integer
        WHEN jsonb_typeof(c->'approvers') = 'array' THEN jsonb_array_length(c->'approvers')
        WHEN NEW.event = 'APPROVAL_GRANTED' THEN 1
        ELSE 0 END;
    data := jsonb_strip_nulls(jsonb_build_object(
        'confirmation_id', NULLIF(NEW.confirmation_id, ''),
        'operation', coalesce(c->>'operation', NULLIF(NEW.operation, '')),
        'summary', c->>'summary',
        'requester', coalesce(c->>'principal', NEW.principal),
        'agent', coalesce(c->>'client', NEW.client),
        'actor', NEW.principal,
        'from', c->>'from_plan',
        'to', c->>'to_plan',
        'amount_due_now_cents', (c->'amount_due_cents'),
        'currency', c->>'currency',
        'expires_at', to_char((c->>'expires_at')::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
        'approvals_given', given,
        'approvals_required', needed,
        'reason', NULLIF(coalesce(details->>'reason', NEW.reason), ''),
        'mandate_id', NEW.consent->>'mandate_id',
        'consent_method', NEW.consent->>'method',
        'request_id', NULLIF(NEW.request_id, '')));
    FOREACH t IN ARRAY types LOOP
        event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
        INSERT INTO webhook_deliveries (event_id, endpoint_id, org, type, data, dedupe_key)
        SELECT event_id, e.id, NEW.org, t, data,
            CASE WHEN t = 'approval.expired' THEN t || ':' || NEW.confirmation_id END
        FROM webhook_endpoints e WHERE e.org = NEW.org AND t = ANY (e.events)
        ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER audit_events_webhook_outbox
    AFTER INSERT ON audit_events FOR EACH ROW
    WHEN (NEW.event IN ('TOKEN_ISSUED', 'APPROVAL_GRANTED', 'APPROVAL_REJECTED', 'APPROVAL_EXPIRED',
        'OPERATION_EXECUTED', 'SCHEDULED_CHANGE_APPLIED', 'OPERATION_FAILED'))
    EXECUTE FUNCTION webhook_outbox_from_audit();

-- Orgs and their Stripe customer.
CREATE TABLE orgs (
    id                 text PRIMARY KEY,
    name               text NOT NULL,
    stripe_customer_id text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- billingd's copy of each org's Stripe subscription. version increases with
-- every change, so a confirmation can tell the subscription it described has
-- changed since. No constraint assumes item ids differ between orgs: Stripe
-- stand-ins repeat them.
CREATE TABLE subscriptions (
    org                    text PRIMARY KEY REFERENCES orgs (id),
    stripe_subscription_id text NOT NULL,
    stripe_item_id         text NOT NULL,
    plan                   text NOT NULL,
    status                 text NOT NULL,
    current_period_end     timestamptz NOT NULL,
    version                bigint NOT NULL DEFAULT 1,
    updated_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_stripe_id_idx ON subscriptions (stripe_subscription_id);

-- A first call of the handshake. Only the SHA-256 of the token is stored.
-- The columns from from_plan to next_charge_at are the terms the token is
-- bound to: everything its summary states.
CREATE TABLE confirmations (
    id                   text PRIMARY KEY,
    token_hash           bytea NOT NULL,
    org                  text NOT NULL REFERENCES orgs (id),
    principal            text NOT NULL,
    client               text NOT NULL DEFAULT '',
    operation            text NOT NULL CHECK (operation IN ('upgrade_plan', 'downgrade_plan')),
    status               text NOT NULL CHECK (status IN ('pending', 'executed', 'failed', 'superseded',
                                                         'cancelled', 'invalidated', 'expired')),
    from_plan            text NOT NULL,
    to_plan              text NOT NULL,
    from_price_id        text NOT NULL,
    to_price_id          text NOT NULL,
    from_amount_cents    bigint NOT NULL,
    to_amount_cents      bigint NOT NULL,
    currency             text NOT NULL,
    proration_date       timestamptz NOT NULL,
    subscription_version bigint NOT NULL,
    amount_due_cents     bigint NOT NULL,
    credit_cents         bigint NOT NULL,
    next_charge_at       timestamptz NOT NULL,
    summary              text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    expires_at           timestamptz NOT NULL,
    finished_at          timestamptz
);
-- The second call looks a token up by its hash.
CREATE UNIQUE INDEX confirmations_token_hash_idx ON confirmations (token_hash);
-- At most one pending confirmation per caller and operation: a first call
-- supersedes the earlier one, and concurrent first calls cannot both win.
-- Also serves listing an org's (or a principal's) pending confirmations.
CREATE UNIQUE INDEX confirmations_pending_idx ON confirmations (org, principal, operation)
    WHERE status = 'pending';

-- The audit log: append-only, written in the transaction of the change it
-- records. No foreign keys, so that rows outlive what they describe.
CREATE TABLE audit_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    event           text NOT NULL,
    org             text NOT NULL,
    principal       text NOT NULL DEFAULT '',
    client          text NOT NULL DEFAULT '',
    operation       text NOT NULL DEFAULT '',
    confirmation_id text NOT NULL DEFAULT '',
    outcome         text NOT NULL DEFAULT '',
    reason          text NOT NULL DEFAULT '',
    request_id      text NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_org_idx ON audit_events (org, id DESC);

-- Contract §13: standing mandates. A person lets one agent client make
-- bounded plan changes later, without being asked each time.
--
-- A mandate row holds only the bounds the person signed for and whether it
-- was revoked. What it has spent is never a counter kept beside it: it is
-- the sum of the quoted amounts (and the number) of the confirmations that
-- were executed, or are executing, under it (confirmations.mandate_id,
-- below). A change that is finally not made leaves executing, and so gives
-- its spend back, by the very write that records it not made; a crash at
-- any instant leaves nothing to release by hand.
CREATE TABLE mandates (
    id                   text PRIMARY KEY,
    org                  text NOT NULL REFERENCES orgs (id),
    principal            text NOT NULL, -- the person (sub) who granted it
    client               text NOT NULL, -- the agent client it lets act
    operations           text[] NOT NULL,
    to_plans             text[] NOT NULL,
    max_amount_due_cents bigint NOT NULL CHECK (max_amount_due_cents >= 0),
    budget_cents         bigint NOT NULL CHECK (budget_cents >= 0),
    max_changes          integer NOT NULL CHECK (max_changes > 0),
    currency             text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    expires_at           timestamptz NOT NULL,
    revoked_at           timestamptz,
    revoked_by           text,
    jws                  text NOT NULL -- the signed mandate given to the person
);
CREATE INDEX mandates_grantee_idx ON mandates (org, principal, client);

-- The mandate a confirmation executes under: written by the recovery
-- point's UPDATE with the consent ({"method":"mandate","mandate_id":…}), so
-- that the spend and the recovery point are one write, committed together.
-- A plain nullable column: adding it rewrites nothing (a generated column
-- would rewrite confirmations under an exclusive lock, stopping every
-- handshake while it ran).
ALTER TABLE confirmations ADD COLUMN mandate_id text;
CREATE INDEX confirmations_mandate_idx ON confirmations (mandate_id) WHERE mandate_id IS NOT NULL;

-- Contract §6: a change recorded as not made puts back the scheduled change
-- its first step released. When that does not succeed at once (Stripe down,
-- rate-limited), the confirmation owes it (restore_owed, recorded in the
-- transaction that records the change not made) and every replica's
-- settler tries again (restore_tries so far, each under its own idempotency
-- key) until it is put back or no longer wanted (restore_settled says why:
-- restored, scheduled_at_provider, changed_since, date_passed, gave_up, …).
ALTER TABLE confirmations
    ADD COLUMN restore_owed       boolean NOT NULL DEFAULT false,
    ADD COLUMN restore_tries      integer NOT NULL DEFAULT 0,
    ADD COLUMN restore_owed_since timestamptz,
    ADD COLUMN restore_settled    text;
CREATE INDEX confirmations_restore_owed_idx ON confirmations (restore_owed_since) WHERE restore_owed;

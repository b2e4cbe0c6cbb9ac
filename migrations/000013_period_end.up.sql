-- Issue 21: downgrades at the period's end.
--
-- A subscription may carry a change the provider makes at a later date (a
-- Stripe subscription schedule whose next phase is another price): its
-- plan, date, schedule and the confirmation that scheduled it, as JSON
-- ({"to","at","confirmation_id","schedule_id","price_id"}); NULL when none.
-- The settler looks for changes that are due among the few subscriptions
-- with one scheduled (the partial index).
ALTER TABLE subscriptions ADD COLUMN scheduled jsonb;
CREATE INDEX subscriptions_scheduled_idx ON subscriptions (org) WHERE scheduled IS NOT NULL;

-- A confirmation is bound to when its change is made (at_period_end), to
-- what the renewal will charge then (at_renewal: {"amount_due_cents",
-- "subtotal_cents","discount_cents","tax_cents","credit_applied_cents"}),
-- to the scheduled change it cancels (cancels, as subscriptions.scheduled)
-- and to the subscription's status when quoted (from_status): a resend after
-- its own release was recorded is judged against the quote, not the copy.
ALTER TABLE confirmations
    ADD COLUMN at_period_end boolean NOT NULL DEFAULT false,
    ADD COLUMN at_renewal    jsonb,
    ADD COLUMN cancels       jsonb,
    ADD COLUMN from_status   text NOT NULL DEFAULT '';

-- Cancelling and resuming (contract §15): billingd's copy of a
-- subscription keeps Stripe's pending cancellation and when it was
-- cancelled, and a confirmation binds what it does to the subscription's
-- end, the customer's feedback sent with it, and whether a cancellation
-- was pending when it was quoted.
ALTER TABLE subscriptions ADD COLUMN cancel_at_period_end boolean NOT NULL DEFAULT false;
ALTER TABLE subscriptions ADD COLUMN canceled_at timestamptz;
-- The settler reads back subscriptions whose cancellation's date has
-- passed, as it does those with a scheduled change (LockDueScheduled).
CREATE INDEX subscriptions_ending_idx ON subscriptions (org) WHERE cancel_at_period_end;
ALTER TABLE confirmations ADD COLUMN cancellation text NOT NULL DEFAULT ''
    CHECK (cancellation IN ('', 'now', 'period_end', 'resume'));
ALTER TABLE confirmations ADD COLUMN cancel_reason text NOT NULL DEFAULT '';
ALTER TABLE confirmations ADD COLUMN cancel_comment text NOT NULL DEFAULT '' CHECK (char_length(cancel_comment) <= 500);
ALTER TABLE confirmations ADD COLUMN from_cancel_at_period_end boolean NOT NULL DEFAULT false;

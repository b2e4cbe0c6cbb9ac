ALTER TABLE confirmations DROP COLUMN from_cancel_at_period_end;
ALTER TABLE confirmations DROP COLUMN cancel_comment;
ALTER TABLE confirmations DROP COLUMN cancel_reason;
ALTER TABLE confirmations DROP COLUMN cancellation;
DROP INDEX subscriptions_ending_idx;
ALTER TABLE subscriptions DROP COLUMN canceled_at;
ALTER TABLE subscriptions DROP COLUMN cancel_at_period_end;

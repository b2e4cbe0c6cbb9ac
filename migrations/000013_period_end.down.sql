ALTER TABLE confirmations DROP COLUMN from_status, DROP COLUMN cancels, DROP COLUMN at_renewal, DROP COLUMN at_period_end;
DROP INDEX subscriptions_scheduled_idx;
ALTER TABLE subscriptions DROP COLUMN scheduled;

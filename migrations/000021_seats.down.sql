ALTER TABLE confirmations DROP COLUMN quantity;
ALTER TABLE subscriptions DROP COLUMN quantity;

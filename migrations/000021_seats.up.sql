-- Seats: billingd's copy of a subscription keeps the first item's quantity,
-- and a confirmation binds the quantity its summary stated, so that a plan
-- change keeps every seat and a change of seats elsewhere voids the token.
ALTER TABLE subscriptions ADD COLUMN quantity bigint NOT NULL DEFAULT 1 CHECK (quantity >= 1);
ALTER TABLE confirmations ADD COLUMN quantity bigint NOT NULL DEFAULT 1 CHECK (quantity >= 1);

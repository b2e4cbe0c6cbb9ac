-- change_seats (contract §15): a confirmation binds the seats it changes
-- to (0: the same as quantity, as a plan change keeps them), and the
-- operations' names are the gated operations billingd knows. The names of
-- the next operations of §15 are allowed already, so that adding one needs
-- no migration and a replica that does not know it yet refuses its
-- confirmations instead of failing on them (billing.operationOf).
ALTER TABLE confirmations ADD COLUMN quantity_to bigint NOT NULL DEFAULT 0
    CHECK (quantity_to >= 0 AND quantity_to <= 10000);
ALTER TABLE confirmations DROP CONSTRAINT confirmations_operation_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_operation_check CHECK (operation IN
    ('upgrade_plan', 'downgrade_plan', 'change_seats', 'cancel_subscription', 'resume_subscription'));

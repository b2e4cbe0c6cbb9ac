-- Confirmations of the newer operations are kept (with their receipts and
-- audit): the narrower CHECK holds for new rows only.
ALTER TABLE confirmations DROP CONSTRAINT confirmations_operation_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_operation_check
    CHECK (operation IN ('upgrade_plan', 'downgrade_plan')) NOT VALID;
ALTER TABLE confirmations DROP COLUMN quantity_to;

DELETE FROM confirmations WHERE operation NOT IN ('upgrade_plan', 'downgrade_plan');
ALTER TABLE confirmations DROP CONSTRAINT confirmations_operation_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_operation_check CHECK (operation IN ('upgrade_plan', 'downgrade_plan'));
ALTER TABLE confirmations DROP COLUMN quantity_to;

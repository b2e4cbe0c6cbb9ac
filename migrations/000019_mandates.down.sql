DROP INDEX IF EXISTS confirmations_mandate_idx;
ALTER TABLE confirmations DROP COLUMN IF EXISTS mandate_id;
DROP TABLE IF EXISTS mandates;

DROP INDEX IF EXISTS confirmations_restore_owed_idx;
ALTER TABLE confirmations
    DROP COLUMN IF EXISTS restore_owed,
    DROP COLUMN IF EXISTS restore_tries,
    DROP COLUMN IF EXISTS restore_owed_since,
    DROP COLUMN IF EXISTS restore_settled;

DROP INDEX IF EXISTS confirmations_approval_pending_idx;
ALTER TABLE confirmations
    DROP COLUMN IF EXISTS approvals_required,
    DROP COLUMN IF EXISTS approvers;

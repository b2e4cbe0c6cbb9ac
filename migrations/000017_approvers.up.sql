-- Several approvers and fail-closed expiry (issue 30, contract §10).
--
-- approvals_required is how many distinct people must approve a change that
-- waits for approval: the strictest matching rule's N, fixed when the
-- confirmation is issued (a later policy can only raise it, at execution).
-- approvers are the people who approved so far, in order, each once; the
-- row lock every decision takes makes concurrent approvals count one after
-- the other. approval stays the aggregate: pending until approvers holds
-- approvals_required people, then granted; rejected on one rejection or
-- when the window ends first (failure says which: rejected, expired).
ALTER TABLE confirmations
    ADD COLUMN approvals_required smallint NOT NULL DEFAULT 1
        CHECK (approvals_required BETWEEN 1 AND 5),
    ADD COLUMN approvers text[] NOT NULL DEFAULT '{}';

-- Approvals granted before this migration had one approver.
UPDATE confirmations SET approvers = ARRAY[approver]
    WHERE approval = 'granted' AND approver IS NOT NULL AND approver <> '';

-- Every replica's expiry round looks for approvals whose window ended.
CREATE INDEX confirmations_approval_pending_idx ON confirmations (expires_at)
    WHERE status = 'pending' AND approval = 'pending';

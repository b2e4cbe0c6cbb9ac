-- Room on each page for the rows every handshake updates (issue 29).
--
-- A second call updates its org's subscription row and, through the audit
-- chain's trigger, its org's audit_chain_heads row. Neither update changes
-- an indexed column (a subscription's scheduled change stays NULL in the
-- usual case, and that is the only indexed column an update may touch), so
-- PostgreSQL can make them HOT updates: the new version on the same page,
-- no new index entries. It can do so only when the page has room, and at
-- the default fillfactor (100) pages of a table filled by inserts have
-- none. Half-full subscription pages and chain-head pages holding a few
-- rows each also spread the rows that every transaction locks over more
-- pages, so fewer backends wait on one page's content lock.
--
-- Confirmations cannot be updated HOT (every update changes the status,
-- which partial indexes name); free room on their pages still keeps a
-- row's new version on its page, which costs fewer relation extensions.
--
-- The settings apply to pages written from now on; an operator may rewrite
-- existing tables (VACUUM FULL, pg_repack) to apply them everywhere.
ALTER TABLE subscriptions SET (fillfactor = 50);
ALTER TABLE audit_chain_heads SET (fillfactor = 20);
ALTER TABLE confirmations SET (fillfactor = 80);

-- One index fewer for every confirmation that executes: the executing
-- confirmations are also found by age (the settler) through
-- confirmations_executing_idx, which holds the same rows (only those
-- executing, a handful at any time) under (org, attempted_at). Each
-- relation a transaction touches is a lock PostgreSQL takes, and beyond 16
-- per transaction they leave the backend's fast path for the shared lock
-- table ("LWLock: LockManager" in make bench's waits at 64 clients).
DROP INDEX confirmations_attempted_idx;

-- The audit chain's hash functions (000006) were declared IMMUTABLE, but
-- they call to_char and convert_to, which are STABLE. PostgreSQL never
-- inlines a function whose body is less stable than its declaration, so
-- every audit event paid for fifteen SQL-function calls: an insert into
-- audit_events took ~0.31 ms, ~0.29 of it in the trigger, the largest cost
-- of a second call in the database (found with pg_stat_statements, issue
-- 15). Declared STABLE, which is what they are, they inline into one
-- expression and the insert takes ~0.08 ms. The hash does not change: the
-- same expression computes it.
ALTER FUNCTION audit_chain_field(text) STABLE;
ALTER FUNCTION audit_event_hash(text, text, bigint, bigint, timestamptz, text, text, text, text, text, text, text, text) STABLE;

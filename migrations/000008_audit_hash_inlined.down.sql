ALTER FUNCTION audit_chain_field(text) IMMUTABLE;
ALTER FUNCTION audit_event_hash(text, text, bigint, bigint, timestamptz, text, text, text, text, text, text, text, text) IMMUTABLE;

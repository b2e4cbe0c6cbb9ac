ALTER TABLE subscriptions RESET (fillfactor);
ALTER TABLE audit_chain_heads RESET (fillfactor);
ALTER TABLE confirmations RESET (fillfactor);
CREATE INDEX confirmations_attempted_idx ON confirmations (attempted_at) WHERE status = 'executing';

ALTER TABLE subscriptions RESET (fillfactor);
ALTER TABLE audit_chain_heads RESET (fillfactor);
ALTER TABLE confirmations RESET (fillfactor);

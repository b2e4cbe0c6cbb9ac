-- Key custody (contract §11): whoever reads the database must not be able
-- to sign a receipt or an audit checkpoint. Until now billingd stored the
-- private key it generated (receipt_keys); from here on the database holds
-- public keys only.
--
-- A process without RECEIPT_SIGNING_KEYS (test mode only) generates its key
-- in memory and registers the public half here; every replica publishes
-- every registered key at /.well-known/jwks.json, so a receipt of any
-- replica verifies. A JWK with a private part ("d") cannot be stored.
CREATE TABLE receipt_public_keys (
    kid        text PRIMARY KEY,
    jwk        jsonb NOT NULL CHECK (jsonb_typeof(jwk) = 'object' AND NOT jwk ? 'd'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- SQL cannot derive a public key from a PEM private key, so the rows of
-- receipt_keys are retired by billingd itself when it starts
-- (receipt.Load → RetireStoredPrivateKeys): each key's public half moves to
-- receipt_public_keys, so receipts signed with it still verify, and the
-- private key is deleted, in one transaction. No billingd writes to
-- receipt_keys any more; this keeps it from ever holding a key again.
CREATE FUNCTION receipt_keys_retired() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'receipt_keys is retired: private keys are never stored in the database';
END $$;
CREATE TRIGGER receipt_keys_retired BEFORE INSERT OR UPDATE ON receipt_keys
    FOR EACH ROW EXECUTE FUNCTION receipt_keys_retired();

-- The private keys retired by 000014 are gone; going down keeps only the
-- table of the old schema (empty), so a generated key is stored again.
DROP TRIGGER receipt_keys_retired ON receipt_keys;
DROP FUNCTION receipt_keys_retired();
DROP TABLE receipt_public_keys;

-- A second call commits a recovery point (the confirmation 'executing')
-- before its Stripe request leaves, so that a crash at any later instant
-- leaves a row that any replica's settler completes.
-- sent_at: when the change was first about to be sent; a resend under a
-- new idempotency key must come within the token's lifetime of it.
ALTER TABLE confirmations ADD COLUMN sent_at timestamptz;
-- failure: why a failed confirmation's change was not made (the audit
-- reason: payment_failed, not_applied, ...), so the owner's retry says so.
ALTER TABLE confirmations ADD COLUMN failure text;

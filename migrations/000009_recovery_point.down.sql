ALTER TABLE confirmations DROP COLUMN failure;
ALTER TABLE confirmations DROP COLUMN sent_at;

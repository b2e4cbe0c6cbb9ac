DROP INDEX web_logins_created_idx;
ALTER TABLE web_logins DROP CONSTRAINT web_logins_client_addr_len;
ALTER TABLE web_logins DROP CONSTRAINT web_logins_return_to_len;
ALTER TABLE web_logins DROP COLUMN client_addr;

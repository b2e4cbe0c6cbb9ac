-- Sign-ins are started by anyone, before they signed in (issue 23): what
-- each one stores is bounded, and how many may be started is counted per
-- client address and in all over a sliding window (websession.LoginLimits).
-- Sign-ins in progress live ten minutes: dropping those with an over-long
-- return address only makes their callback start again.
DELETE FROM web_logins WHERE octet_length(return_to) > 512;
ALTER TABLE web_logins ADD COLUMN client_addr text NOT NULL DEFAULT '';
ALTER TABLE web_logins ADD CONSTRAINT web_logins_return_to_len CHECK (octet_length(return_to) <= 512);
ALTER TABLE web_logins ADD CONSTRAINT web_logins_client_addr_len CHECK (octet_length(client_addr) <= 64);
CREATE INDEX web_logins_created_idx ON web_logins (created_at);

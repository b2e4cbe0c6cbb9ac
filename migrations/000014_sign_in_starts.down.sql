CREATE INDEX web_logins_created_idx ON web_logins (created_at);
DROP TABLE sign_in_starts;

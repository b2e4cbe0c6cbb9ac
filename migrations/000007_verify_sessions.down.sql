DROP TABLE web_sessions;
DROP TABLE web_logins;
ALTER TABLE confirmations DROP COLUMN approver_acr;
ALTER TABLE confirmations DROP COLUMN approver_auth_time;
ALTER TABLE confirmations DROP COLUMN verified_acr;
ALTER TABLE confirmations DROP COLUMN verified_auth_time;
ALTER TABLE confirmations DROP COLUMN verified_method;
ALTER TABLE confirmations DROP COLUMN verified_at;
ALTER TABLE confirmations DROP COLUMN verify_required;

-- The verify level (contract §10): a confirmation that needs the requester
-- to sign in again, and the proof once they did.
ALTER TABLE confirmations ADD COLUMN verify_required boolean NOT NULL DEFAULT false;
ALTER TABLE confirmations ADD COLUMN verified_at timestamptz;
ALTER TABLE confirmations ADD COLUMN verified_method text CHECK (verified_method IN ('page', 'step_up'));
ALTER TABLE confirmations ADD COLUMN verified_auth_time timestamptz;
ALTER TABLE confirmations ADD COLUMN verified_acr text;
-- How the approver had authenticated when deciding.
ALTER TABLE confirmations ADD COLUMN approver_auth_time timestamptz;
ALTER TABLE confirmations ADD COLUMN approver_acr text;

-- Sign-ins in progress (OIDC authorization code + PKCE): any replica may
-- receive the callback. Rows are single use and short-lived; only hashes of
-- the state and of the browser binding cookie are stored.
CREATE TABLE web_logins (
    state_hash      bytea PRIMARY KEY,
    browser_hash    bytea NOT NULL,
    nonce           text NOT NULL,
    code_verifier   text NOT NULL,
    return_to       text NOT NULL,
    verify_id       text NOT NULL DEFAULT '', -- the confirmation a verification sign-in is for
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX web_logins_expires_idx ON web_logins (expires_at);

-- Signed-in browsers of the dashboard, approval and verification pages.
-- Only a hash of the cookie's value is stored.
CREATE TABLE web_sessions (
    id_hash            bytea PRIMARY KEY,
    csrf_token         text NOT NULL,
    org                text NOT NULL,
    subject            text NOT NULL,
    client             text NOT NULL,
    scopes             text[] NOT NULL,
    auth_time          timestamptz,
    acr                text NOT NULL DEFAULT '',
    -- The last fresh sign-in made for a confirmation's verification page.
    verify_id          text NOT NULL DEFAULT '',
    verify_auth_time   timestamptz,
    verify_acr         text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz NOT NULL
);
CREATE INDEX web_sessions_expires_idx ON web_sessions (expires_at);

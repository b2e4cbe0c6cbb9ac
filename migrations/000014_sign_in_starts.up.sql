-- Sign-in starts are counted when they are made (issue 28): counting the
-- rows of web_logins let a start whose callback deleted its row be made
-- again, without limit. One row per bucket (a client address or its /64, all
-- addresses '*', or one confirmation's own budget) and window, incremented
-- in the statement that checks the limit; rows are purged once the window
-- after theirs ended. They are few (a window holds at most RATE_LIMIT_SIGN_INS_TOTAL
-- counts of addresses, and one per confirmation waiting for a sign-in), so
-- the purge scans them.
CREATE TABLE sign_in_starts (
    bucket        text NOT NULL CHECK (octet_length(bucket) <= 80),
    window_start  timestamptz NOT NULL,
    window_end    timestamptz NOT NULL,
    starts        integer NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
-- web_logins.client_addr stays (the bucket a sign-in was counted in, for an
-- operator reading the table) but is no longer counted.
DROP INDEX web_logins_created_idx;

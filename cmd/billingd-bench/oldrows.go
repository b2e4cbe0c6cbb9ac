package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// oldRowsSQL inserts finished confirmations $1…$2 as billingd would have
// left them over the last 60 days (inside the purge retention billingdEnv
// sets), one every $7 seconds in the order they were made: spread over every
// org and principal and both operations, mostly superseded or executed,
// some expired or cancelled, with random ids and token hashes (so they land
// all over those indexes, like real ones) and a summary of the usual length.
const oldRowsSQL = `
INSERT INTO confirmations (id, token_hash, org, principal, client, operation, status,
	from_plan, to_plan, from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency,
	proration_date, subscription_version, amount_due_cents, credit_cents, next_charge_at, summary,
	created_at, expires_at, finished_at)
SELECT 'cfm_' || rtrim(translate(encode(substr(sha256(('id' || g)::bytea), 1, 16), 'base64'), '+/', '-_'), '='),
	sha256(('token' || g)::bytea), org::text, (org * 100 + 1 + (g / $4) % $5)::text, $6,
	CASE WHEN up THEN 'upgrade_plan' ELSE 'downgrade_plan' END,
	(ARRAY['superseded', 'superseded', 'superseded', 'superseded', 'executed', 'executed', 'executed',
		'expired', 'expired', 'cancelled'])[1 + g % 10],
	CASE WHEN up THEN 'pro' ELSE 'scale' END, CASE WHEN up THEN 'scale' ELSE 'pro' END,
	CASE WHEN up THEN 'price_billingd_pro' ELSE 'price_billingd_scale' END,
	CASE WHEN up THEN 'price_billingd_scale' ELSE 'price_billingd_pro' END,
	CASE WHEN up THEN 1900 ELSE 4900 END, CASE WHEN up THEN 4900 ELSE 1900 END, 'usd',
	t, 1 + g % 40, CASE WHEN up THEN 1500 ELSE 0 END, CASE WHEN up THEN 0 ELSE 1500 END, t + interval '15 days',
	CASE WHEN up
		THEN 'Upgrade Bench Org ' || org || ' from Pro ($19/mo) to Scale ($49/mo). Pro-rated to today: $15.00 due now; first full Scale charge on ' || to_char(t + interval '15 days', 'Mon DD, YYYY') || '.'
		ELSE 'Downgrade Bench Org ' || org || ' from Scale ($49/mo) to Pro ($19/mo). Unused Scale time of $15.00 is credited to the next invoice on ' || to_char(t + interval '15 days', 'Mon DD, YYYY') || '.'
	END,
	t, t + interval '60 seconds', t + random() * interval '60 seconds'
FROM generate_series($1::bigint, $2::bigint) AS g,
	LATERAL (SELECT $3 + g % $4 AS org, g % 2 = 0 AS up,
		now() - interval '60 days' + g * $7::float8 * interval '1 second' AS t) AS x`

// oldRowsChunk is how many rows one statement inserts: big enough to be
// fast, small enough to report progress.
const oldRowsChunk = 1_000_000

// addOldRows inserts old confirmations numbered have+1…want.
func (e *env) addOldRows(ctx context.Context, have, want int) error {
	if want <= have {
		return nil
	}
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Every row references a seeded org; skipping the per-row foreign-key
	// trigger (superusers only) roughly halves the load time. Without it
	// the rows are simply checked.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		e.log.Printf("  (foreign keys checked while loading: %v)", err)
	}
	// The largest size is 60 days' worth: older rows would be purged.
	step := (60 * 24 * time.Hour).Seconds() / float64(slices.Max(e.opts.oldRows))
	for from := have + 1; from <= want; from += oldRowsChunk {
		to := min(from+oldRowsChunk-1, want)
		start := time.Now()
		if _, err := conn.Exec(ctx, oldRowsSQL, from, to, orgBase, e.opts.orgs, e.opts.principals, benchClient, step); err != nil {
			return fmt.Errorf("insert old rows %d–%d: %w", from, to, err)
		}
		e.log.Printf("inserted old rows %d–%d (%s)", from, to, time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	// The first vacuum of the new rows sets their hint bits and visibility
	// map: work autovacuum would have done long ago for rows this old.
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) confirmations`); err != nil {
		return fmt.Errorf("vacuum old rows: %w", err)
	}
	e.log.Printf("vacuumed confirmations (%s)", time.Since(start).Round(time.Millisecond))
	return nil
}

// settle vacuums and analyzes what the last run changed and checkpoints:
// the steady state autovacuum keeps a long-running service in, so that a
// run neither competes with autovacuum catching up nor pays for the
// previous run's dirty pages. ANALYZE matters beyond statistics: it
// invalidates the plans billingd's connections cached, which may have been
// made when a table was nearly empty (a sequential scan "costing" nothing,
// then kept while the table grows).
func (e *env) settle(ctx context.Context) error {
	if _, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) confirmations, audit_events, subscriptions`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// confirmationRows counts the confirmations, old and new.
func (e *env) confirmationRows(ctx context.Context) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM confirmations`).Scan(&n)
	return n, err
}

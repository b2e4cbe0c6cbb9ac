-- The first call of the handshake (propose), statement for statement as
-- internal/postgres runs it, in its two round trips: Store.AccountForCall
-- (the rate limit's count and the account, one pipeline as pgx sends a
-- Batch), then Store.IssueConfirmation's batch (the per-caller advisory
-- lock and issueSQL). pgbench cannot bind an empty string, so approval is
-- "granted" where billingd's is empty (NULLIF makes that NULL). A few
-- bytes, same work. The scripts_test.go test and the bench's traced calls
-- check the text against billingd's. Each pgbench client works on its own
-- orgs, as the load generator's clients do.
\set org :org_base + :client_id + :clients * random(0, :orgs_per_client - 1)
\set principal :org * 100 + random(1, :principals)
\set cid random(1, 1000000000000000000)
\set hash random(1, 1000000000000000000)
SELECT o.id, o.name, o.stripe_customer_id,
	s.stripe_subscription_id, s.stripe_item_id, s.plan, s.status, s.current_period_end, s.version,
	coalesce(s.synced_at, '0001-01-01 00:00:00+00'), p.policy, s.scheduled, s.quantity,
	s.cancel_at_period_end, s.canceled_at, now(),
			EXISTS (SELECT 1 FROM confirmations x WHERE x.org = o.id AND x.status = 'executing'),
			EXISTS (SELECT 1 FROM mandates m WHERE m.org = o.id AND m.principal = :principal
				AND m.revoked_at IS NULL AND m.expires_at > now())
		FROM orgs o JOIN subscriptions s ON s.org = o.id LEFT JOIN org_policies p ON p.org = o.id WHERE o.id = :org
\gset acct_
\startpipeline
SELECT count(*) FILTER (WHERE event <> 'TOKEN_REJECTED'), count(*) FILTER (WHERE event = 'TOKEN_REJECTED'),
			min(at) FILTER (WHERE event <> 'TOKEN_REJECTED'), min(at) FILTER (WHERE event = 'TOKEN_REJECTED'), now()
		FROM audit_events
		WHERE org = :org AND principal = :principal AND event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED', 'OPERATION_DENIED')
			AND (event <> 'OPERATION_DENIED' OR (confirmation_id = '' AND reason <> :person_required))
			AND at > now() - :window_us * interval '1 microsecond';
SELECT pg_advisory_xact_lock(hashtextextended(:principal, 0));
SELECT set_config('lock_timeout', :lock_wait, true);
SELECT 1 FROM subscriptions WHERE org = :org FOR SHARE;
SELECT set_config('lock_timeout', '0', true);
WITH quotable AS (
	SELECT 1 FROM subscriptions WHERE org = :org AND version = :acct_version
		AND NOT EXISTS (SELECT 1 FROM confirmations WHERE org = :org AND status = 'executing')
), superseded AS (
	UPDATE confirmations SET status = 'superseded', finished_at = now()
	WHERE org = :org AND principal = :principal AND operation = :operation AND status = 'pending' AND EXISTS (SELECT 1 FROM quotable)
	RETURNING id
), issued AS (
	INSERT INTO confirmations (id, token_hash, org, principal, client, operation, status,
		from_plan, to_plan, from_price_id, to_price_id, from_amount_cents, to_amount_cents, currency,
		proration_date, subscription_version, amount_due_cents, credit_cents, next_charge_at, summary, expires_at,
		approval, agent, verify_required, livemode,
		subtotal_cents, discount_cents, tax_cents, credit_applied_cents, at_period_end, at_renewal, cancels, from_status,
		approvals_required, quantity, quantity_to,
		cancellation, cancel_reason, cancel_comment, from_cancel_at_period_end)
	SELECT :cid, :hash, :org, :principal, :client, :operation, 'pending',
		:from_plan, :to_plan, :from_price, :to_price, :from_cents, :to_cents, :currency, :proration_date, :acct_version, :due_cents, :credit_cents, :next_charge_at, :summary, now() + :ttl_us * interval '1 microsecond',
		NULLIF(:approval, ''), :agent, :verify_required, :livemode,
		:subtotal_cents, :discount_cents, :tax_cents, :applied_cents, :at_period_end, :no_renewal, :no_cancels, :sub_status,
		:approvals_required, :quantity, :quantity_to,
		:cancellation, :cancel_reason, :cancel_comment, :pending_cancel
	FROM (SELECT count(*) FROM superseded) AS after_supersede, quotable
	RETURNING created_at, expires_at
), audited AS (
	INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id)
	SELECT 'TOKEN_REVOKED', :org, :principal, :client, :operation, id, 'revoked', 'superseded', :request_id FROM superseded
	UNION ALL
	SELECT :ev_issued, :org, :principal, :client, :operation, :cid, :ok, '', :request_id FROM quotable
)
SELECT created_at, expires_at FROM issued;
\endpipeline

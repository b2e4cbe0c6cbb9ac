-- A full handshake (propose, then confirm), statement for statement as
-- internal/postgres runs it, round trip for round trip. First the first
-- call (see propose.sql), then the second's three round trips, as storeTx
-- sends them: BEGIN goes with storeTx.ReadActivity's count (the rate limit
-- on failed second calls) and storeTx.LockByToken's batch (the
-- subscription's lock, the confirmation's, the unsettled check); the recovery point (SaveRecoveryPoint: the confirmation
-- executing, TOKEN_VALIDATED, COMMIT, BEGIN and the same locks again); the
-- storeTx.Record writes with COMMIT, audit events last. The Stripe requests billingd makes
-- between them (the read of the subscription before the recovery point,
-- the update after it) are not part of the database's ceiling. pgbench cannot bind NULL or an empty string, so approval is
-- "granted" where billingd's is empty (NULLIF makes that NULL), synced_at
-- gets a time where billingd sends NULL (coalesce keeps the column) and the
-- audit reason is "-" where billingd's is empty; TOKEN_VALIDATED's consent
-- is the JSON null where billingd's is NULL (the chain then hashes it with
-- version 2, as OPERATION_EXECUTED's). A few bytes, same work.
-- The scripts_test.go test and the bench's traced calls check the text
-- against billingd's.
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
\startpipeline
BEGIN;
SELECT count(*) FILTER (WHERE event <> 'TOKEN_REJECTED'), count(*) FILTER (WHERE event = 'TOKEN_REJECTED'),
			min(at) FILTER (WHERE event <> 'TOKEN_REJECTED'), min(at) FILTER (WHERE event = 'TOKEN_REJECTED'), now()
		FROM audit_events
		WHERE org = :org AND principal = :principal AND event IN ('TOKEN_ISSUED', 'TOKEN_REJECTED', 'OPERATION_DENIED')
			AND (event <> 'OPERATION_DENIED' OR (confirmation_id = '' AND reason <> :person_required))
			AND at > now() - :window_us * interval '1 microsecond';
SELECT 1 FROM subscriptions s WHERE s.org = :org AND EXISTS (
	SELECT 1 FROM confirmations c WHERE c.token_hash = :hash AND c.org = :org AND c.principal = :principal) FOR UPDATE OF s;
SELECT c.id, c.token_hash, c.org, c.principal, c.client, c.operation, c.status,
	c.from_plan, c.to_plan, c.from_price_id, c.to_price_id, c.from_amount_cents, c.to_amount_cents, c.currency,
	c.proration_date, c.subscription_version, c.amount_due_cents, c.credit_cents, c.next_charge_at,
	c.summary, c.created_at, c.expires_at, coalesce(c.approval, ''), coalesce(c.approver, ''),
	c.agent, c.attempt, c.result, c.sent_at, c.attempted_at, coalesce(c.failure, ''),
	c.approver_auth_time, coalesce(c.approver_acr, ''), c.livemode,
	c.subtotal_cents, c.discount_cents, c.tax_cents, c.credit_applied_cents, c.consent, c.at_period_end, c.at_renewal, c.cancels, c.from_status, c.restore_owed, c.restore_tries, c.restore_owed_since, coalesce(c.restore_settled, ''), c.approvals_required, c.approvers, c.quantity, c.quantity_to,
	c.cancellation, c.cancel_reason, c.cancel_comment, c.from_cancel_at_period_end, c.verify_required, c.verified_at, coalesce(c.verified_method, ''),
	c.verified_auth_time, coalesce(c.verified_acr, ''), o.id, o.name, o.stripe_customer_id,
	s.stripe_subscription_id, s.stripe_item_id, s.plan, s.status, s.current_period_end, s.version,
	coalesce(s.synced_at, '0001-01-01 00:00:00+00'), p.policy, s.scheduled, s.quantity,
	s.cancel_at_period_end, s.canceled_at, now()
		FROM confirmations c JOIN orgs o JOIN subscriptions s ON s.org = o.id LEFT JOIN org_policies p ON p.org = o.id ON o.id = c.org
		WHERE c.token_hash = :hash AND c.org = :org AND c.principal = :principal
		FOR UPDATE OF c, s;
SELECT EXISTS (SELECT 1 FROM confirmations
	WHERE org = :org AND status = 'executing' AND token_hash <> :hash),
	(SELECT policy FROM org_policies WHERE org = :org), clock_timestamp();
\endpipeline
\startpipeline
UPDATE confirmations SET status = 'executing', attempt = :attempt, attempted_at = clock_timestamp(),
		sent_at = coalesce(sent_at, clock_timestamp()), consent = coalesce(:consent, consent),
		mandate_id = coalesce(:consent::jsonb ->> 'mandate_id', mandate_id) WHERE id = :cid;
INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id, consent)
			VALUES (:ev_validated, :org, :principal, :client, :operation, :cid, :ok, :reason, :request_id, :no_consent);
COMMIT;
BEGIN;
SELECT 1 FROM subscriptions s JOIN confirmations c ON c.org = s.org WHERE c.id = :cid FOR UPDATE OF s;
SELECT c.id, c.token_hash, c.org, c.principal, c.client, c.operation, c.status,
	c.from_plan, c.to_plan, c.from_price_id, c.to_price_id, c.from_amount_cents, c.to_amount_cents, c.currency,
	c.proration_date, c.subscription_version, c.amount_due_cents, c.credit_cents, c.next_charge_at,
	c.summary, c.created_at, c.expires_at, coalesce(c.approval, ''), coalesce(c.approver, ''),
	c.agent, c.attempt, c.result, c.sent_at, c.attempted_at, coalesce(c.failure, ''),
	c.approver_auth_time, coalesce(c.approver_acr, ''), c.livemode,
	c.subtotal_cents, c.discount_cents, c.tax_cents, c.credit_applied_cents, c.consent, c.at_period_end, c.at_renewal, c.cancels, c.from_status, c.restore_owed, c.restore_tries, c.restore_owed_since, coalesce(c.restore_settled, ''), c.approvals_required, c.approvers, c.quantity, c.quantity_to,
	c.cancellation, c.cancel_reason, c.cancel_comment, c.from_cancel_at_period_end, c.verify_required, c.verified_at, coalesce(c.verified_method, ''),
	c.verified_auth_time, coalesce(c.verified_acr, ''), o.id, o.name, o.stripe_customer_id,
	s.stripe_subscription_id, s.stripe_item_id, s.plan, s.status, s.current_period_end, s.version,
	coalesce(s.synced_at, '0001-01-01 00:00:00+00'), p.policy, s.scheduled, s.quantity,
	s.cancel_at_period_end, s.canceled_at, now()
		FROM confirmations c JOIN orgs o JOIN subscriptions s ON s.org = o.id LEFT JOIN org_policies p ON p.org = o.id ON o.id = c.org
		WHERE c.id = :cid FOR UPDATE OF c, s;
WITH this AS (SELECT id, org FROM confirmations WHERE id = :cid)
	SELECT EXISTS (SELECT 1 FROM confirmations x, this WHERE x.org = this.org AND x.status = 'executing' AND x.id <> this.id),
	(SELECT policy FROM org_policies p, this WHERE p.org = this.org), clock_timestamp();
\endpipeline
\startpipeline
UPDATE confirmations SET status = :executed, finished_at = now(), attempt = coalesce(:attempt, attempt),
			attempted_at = CASE WHEN :attempt::integer IS NULL THEN attempted_at ELSE clock_timestamp() END, result = coalesce(:result, result),
			failure = coalesce(NULLIF(:reason, ''), failure)
			WHERE id = :cid;
UPDATE subscriptions SET plan = :to_plan, status = :sub_status, current_period_end = :period_end, stripe_item_id = :item_id,
			synced_at = coalesce(:synced_at, synced_at), scheduled = :no_scheduled, quantity = :quantity, cancel_at_period_end = :pending_cancel_after, canceled_at = :canceled_at,
			version = version + 1, updated_at = now() WHERE org = :org;
INSERT INTO receipts (confirmation_id, org, principal, summary, receipt) VALUES (:cid, :org, :principal, :summary, :receipt);
INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id, consent)
			VALUES (:ev_executed, :org, :principal, :client, :operation, :cid, :ok, :reason, :request_id, :consent);
COMMIT;
\endpipeline

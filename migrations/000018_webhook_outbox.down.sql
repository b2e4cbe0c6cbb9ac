DROP TRIGGER IF EXISTS audit_events_webhook_outbox ON audit_events;
DROP FUNCTION IF EXISTS webhook_outbox_from_audit();
DROP TABLE IF EXISTS webhook_deliveries;
DROP TABLE IF EXISTS webhook_endpoints;

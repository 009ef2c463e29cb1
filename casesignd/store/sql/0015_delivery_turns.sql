-- Tenants' turns at webhook deliveries (casesignd.store.outbox): each tenant's oldest
-- due deliveries, found without reading through another tenant's backlog.
CREATE INDEX webhook_deliveries_tenant_due ON webhook_deliveries
  (tenant, next_attempt_at, delivery_id)
  WHERE state = 'pending';

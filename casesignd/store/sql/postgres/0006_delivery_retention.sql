-- Retention's scan of the webhook outbox (casesignd.store.outbox): only the rows that
-- ended (delivered, dead, skipped), by when they ended.
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (updated_at)
  WHERE state <> 'pending';

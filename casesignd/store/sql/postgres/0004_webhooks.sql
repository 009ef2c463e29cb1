-- The webhook outbox (casesignd.store.outbox): a delivery is written in the
-- transaction of the state change it reports, and leased to a sender like a claim
-- (attempts fences its outcome).
CREATE TABLE webhook_deliveries (
  delivery_id     text PRIMARY KEY,
  tenant          text NOT NULL,
  job_id          text NOT NULL,
  event           text NOT NULL,
  endpoint        text NOT NULL,
  state           text NOT NULL DEFAULT 'pending',
  attempts        integer NOT NULL DEFAULT 0,
  created_at      double precision NOT NULL,
  next_attempt_at double precision NOT NULL,
  lease_owner     text,
  lease_expires   double precision,
  last_status     integer,
  last_error      text,
  delivered_at    double precision,
  updated_at      double precision NOT NULL
);
-- The sender's scan: only pending rows, by when they are due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
  WHERE state = 'pending';
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant, delivery_id);
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id);

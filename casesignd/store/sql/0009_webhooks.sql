-- The webhook outbox (casesignd.store.outbox): a delivery is written in the
-- transaction of the state change it reports, and leased to a sender like a claim
-- (attempts fences its outcome).
CREATE TABLE webhook_deliveries (
  delivery_id     TEXT PRIMARY KEY,
  tenant          TEXT NOT NULL,
  job_id          TEXT NOT NULL,
  event           TEXT NOT NULL,
  endpoint        TEXT NOT NULL,
  state           TEXT NOT NULL DEFAULT 'pending',
  attempts        INTEGER NOT NULL DEFAULT 0,
  created_at      REAL NOT NULL,
  next_attempt_at REAL NOT NULL,
  lease_owner     TEXT,
  lease_expires   REAL,
  last_status     INTEGER,
  last_error      TEXT,
  delivered_at    REAL,
  updated_at      REAL NOT NULL
);
-- The sender's scan: only pending rows, by when they are due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
  WHERE state = 'pending';
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant, delivery_id);
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id);

-- What each tenant used of its limits ([tenants.limits], casesignd.core.tenant_limits)
-- in the current window: one row per tenant and measure ('admitted', 'upload_bytes'),
-- which starts again from nothing when a later window begins. Every daemon counts in
-- the same row, and an upsert takes its lock: the limit holds across them.
CREATE TABLE tenant_usage (
  tenant        text NOT NULL,
  measure       text NOT NULL,
  window_start  float8 NOT NULL,
  used          bigint NOT NULL,
  PRIMARY KEY (tenant, measure)
);

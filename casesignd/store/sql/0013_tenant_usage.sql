-- What each tenant used of its limits ([tenants.limits], casesignd.core.tenant_limits)
-- in the current window: one row per tenant and measure ('admitted', 'upload_bytes'),
-- which starts again from nothing when a later window begins. Rows of a few bytes,
-- one per tenant and measure: nothing to prune.
CREATE TABLE tenant_usage (
  tenant        TEXT NOT NULL,
  measure       TEXT NOT NULL,
  window_start  REAL NOT NULL,
  used          INTEGER NOT NULL,
  PRIMARY KEY (tenant, measure)
);

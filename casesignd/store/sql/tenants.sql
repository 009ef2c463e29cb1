-- Named statements of the SQLite store for tenants' limits and the operator's view
-- (casesignd.store.tenants).

-- Take :amount of a tenant's measure in the window that starts at :window_start, when
-- it fits under :cap: the row's use after it, or no row when it does not fit. A row of
-- an earlier window counts as empty.
-- name: charge_usage
INSERT INTO tenant_usage (tenant, measure, window_start, used)
VALUES (:tenant, :measure, :window_start, :amount)
ON CONFLICT (tenant, measure) DO UPDATE
   SET used = CASE WHEN window_start < excluded.window_start THEN excluded.used
                   ELSE used + excluded.used END,
       window_start = max(window_start, excluded.window_start)
 WHERE (CASE WHEN window_start < excluded.window_start THEN 0 ELSE used END)
       + excluded.used <= :cap
RETURNING used;

-- Give back what a charge took and did not use (an upload that failed or stored
-- nothing new), in the window it was taken in.
-- name: refund_usage
UPDATE tenant_usage SET used = max(0, used - :amount)
 WHERE tenant = :tenant AND measure = :measure AND window_start = :window_start;

-- name: tenant_waiting
SELECT count(*) AS n FROM jobs WHERE tenant = :tenant AND state IN ('queued', 'retry_wait');

-- One tenant's limited admissions and replays take turns: the one writer already
-- runs every transaction in turn (PostgreSQL locks here).
-- name: admission_lock
SELECT 1;

-- Jobs running now per tenant of :tenants (those with a running limit): at most the
-- workers of every daemon (jobs_running).
-- name: running_by_tenant
SELECT tenant, count(*) AS n FROM jobs
 WHERE state = 'running' AND tenant IN (SELECT value FROM json_each(:tenants))
 GROUP BY tenant;

-- The operator's queues: jobs waiting, running and failed per tenant and kind, and
-- the oldest wait of each.
-- name: admin_queues
SELECT tenant, kind, state, count(*) AS n, min(coalesce(queued_since, next_attempt_at)) AS oldest
  FROM jobs WHERE state IN ('queued', 'retry_wait', 'running', 'failed')
 GROUP BY tenant, kind, state;

-- The oldest queued job's wait per tenant (the metrics' queue age).
-- name: oldest_queued_by_tenant
SELECT tenant, min(queued_since) AS oldest FROM jobs WHERE state = 'queued' GROUP BY tenant;

-- Leases held now, per holder (a node's process).
-- name: lease_holders
SELECT lease_owner, count(*) AS n, min(lease_expires) AS soonest, max(lease_expires) AS latest
  FROM jobs WHERE state = 'running' GROUP BY lease_owner;

-- Jobs of one state (the dead letter: failed) across tenants, newest first, narrowed
-- by tenant, kind and code.
-- name: dead_letter
SELECT * FROM jobs
 WHERE state = :state AND job_id < :cursor
   AND (:tenant IS NULL OR tenant = :tenant) AND (:kind IS NULL OR kind = :kind)
   AND (:code IS NULL OR error_code = :code)
 ORDER BY job_id DESC LIMIT :limit;

-- Named statements of the PostgreSQL store for tenants' limits and the operator's
-- view (casesignd.store.tenants).

-- Take %(amount)s of a tenant's measure in the window that starts at
-- %(window_start)s, when it fits under %(cap)s: the row's use after it, or no row when
-- it does not fit. A row of an earlier window counts as empty. The upsert locks the
-- row: every daemon's charges of one tenant take turns on it.
-- name: charge_usage
INSERT INTO tenant_usage AS u (tenant, measure, window_start, used)
VALUES (%(tenant)s, %(measure)s, %(window_start)s::float8, %(amount)s::bigint)
ON CONFLICT (tenant, measure) DO UPDATE
   SET used = CASE WHEN u.window_start < excluded.window_start THEN excluded.used
                   ELSE u.used + excluded.used END,
       window_start = greatest(u.window_start, excluded.window_start)
 WHERE (CASE WHEN u.window_start < excluded.window_start THEN 0 ELSE u.used END)
       + excluded.used <= %(cap)s::bigint
RETURNING used;

-- name: refund_usage
UPDATE tenant_usage SET used = greatest(0, used - %(amount)s::bigint)
 WHERE tenant = %(tenant)s AND measure = %(measure)s
   AND window_start = %(window_start)s::float8;

-- One tenant's limited admissions take turns across the daemons (its waiting count
-- is then exact), until the transaction ends.
-- name: admission_lock
SELECT pg_advisory_xact_lock(hashtextextended('casesignd:admit:' || %(tenant)s::text, 0));

-- Claims while any tenant has a running limit take turns across the daemons, so that
-- the running count each reads holds until it commits.
-- name: running_claims_lock
SELECT pg_advisory_xact_lock(hashtextextended('casesignd:claims:running', 0));

-- name: tenant_waiting
SELECT count(*) AS n FROM jobs WHERE tenant = %(tenant)s AND state IN ('queued', 'retry_wait');

-- name: running_by_tenant
SELECT tenant, count(*) AS n FROM jobs
 WHERE state = 'running' AND tenant = ANY(%(tenants)s::text[])
 GROUP BY tenant;

-- name: admin_queues
SELECT tenant, kind, state, count(*) AS n,
       min(coalesce(queued_since, next_attempt_at)) AS oldest
  FROM jobs WHERE state IN ('queued', 'retry_wait', 'running', 'failed')
 GROUP BY tenant, kind, state;

-- name: oldest_queued_by_tenant
SELECT tenant, min(queued_since) AS oldest FROM jobs WHERE state = 'queued' GROUP BY tenant;

-- name: lease_holders
SELECT lease_owner, count(*) AS n, min(lease_expires) AS soonest, max(lease_expires) AS latest
  FROM jobs WHERE state = 'running' GROUP BY lease_owner;

-- The daemons connected now, by the application name each session gives
-- ("casesignd:NODE"), and since when.
-- name: connected_nodes
SELECT substr(application_name, 11) AS node, min(extract(epoch FROM backend_start))::float8 AS since
  FROM pg_stat_activity WHERE application_name LIKE 'casesignd:%%'
 GROUP BY 1;

-- name: dead_letter
SELECT * FROM jobs
 WHERE state = %(state)s AND job_id < %(cursor)s
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
   AND (%(code)s::text IS NULL OR error_code = %(code)s::text)
 ORDER BY job_id DESC LIMIT %(limit)s;

-- Named statements of the PostgreSQL store's claims among tenants (casesignd.store.claims).

-- name: pause_claims
INSERT INTO pauses (tenant, kind, since, actor) VALUES (%(tenant)s, %(kind)s, %(now)s, %(actor)s)
ON CONFLICT DO NOTHING;

-- name: resume_claims
DELETE FROM pauses WHERE tenant = %(tenant)s AND kind = %(kind)s;

-- name: list_pauses
SELECT tenant, kind, since, actor FROM pauses ORDER BY since, tenant, kind;

-- A claim is one statement, the tenants taking turns (casesignd.store.claims):
--  lanes: the (tenant, priority) pairs with queued jobs, one index step each through
--    jobs_fair (a skip scan), less the tenants a pause holds whole;
--  due: each lane's first %(limit)s due jobs that fit the byte budget, of a kind
--    this daemon runs and not paused for its tenant, unlocked: one range of
--    jobs_fair ("due" is a bound of it: a job scheduled for later is never read).
--    The kinds a lane may claim are an array computed once per lane, not a join per
--    row, which would make the planner expect no row to pass and read the tenant's
--    whole queue by another index and sort it;
--  tagged: each tenant's jobs in its own order (priority, due time, age), the n-th
--    one tagged with its turn's start, start + (n - 1) * stride (%(tenants)s,
--    %(starts)s, %(strides)s, %(ranks)s: this daemon's turns; any other tenant
--    starts at %(virtual)s with weight 1);
--  candidates, locked: the first 2 * %(limit)s by tag (a tie: rank, the tenant
--    served least recently), and of them, by their keys (an index lookup each, which
--    a generic plan keeps), those that no other transaction holds (SKIP LOCKED:
--    daemons claiming at once take different jobs and never wait for each other; a
--    row another daemon took meanwhile is read anew and dropped);
--  picked: in tag order, those that fit the budget together, %(limit)s at most.
-- The picked jobs' attempt numbers are bumped (they fence every later update) and
-- the signature recorded for each one's signature key is read.
-- name: claim_batch
WITH RECURSIVE lanes (tenant, priority) AS (
  (SELECT tenant, priority FROM jobs WHERE state = 'queued' ORDER BY tenant, priority LIMIT 1)
  UNION ALL
  SELECT nxt.tenant, nxt.priority FROM lanes AS l CROSS JOIN LATERAL (
    SELECT j.tenant, j.priority FROM jobs AS j
     WHERE j.state = 'queued' AND (j.tenant, j.priority) > (l.tenant, l.priority)
     ORDER BY j.tenant, j.priority LIMIT 1) AS nxt
), turns AS MATERIALIZED (
  SELECT l.tenant, l.priority, coalesce(t.start, %(virtual)s::float8) AS start,
         coalesce(t.stride, 1.0) AS stride, coalesce(t.rank, -1) AS rank,
         array(SELECT k FROM unnest(%(kinds)s::text[]) AS k
                WHERE NOT EXISTS (SELECT 1 FROM pauses AS p
                                   WHERE p.tenant IN ('', l.tenant) AND p.kind = k)) AS kinds
    FROM lanes AS l
    LEFT JOIN unnest(%(tenants)s::text[], %(starts)s::float8[], %(strides)s::float8[],
                     %(ranks)s::bigint[]) AS t (tenant, start, stride, rank) ON t.tenant = l.tenant
   WHERE NOT EXISTS (SELECT 1 FROM pauses AS p WHERE p.kind = '' AND p.tenant IN ('', l.tenant))
     AND l.tenant <> ALL(%(skip)s::text[])  -- at their running limits (casesignd.store.tenants)
), due AS MATERIALIZED (
  SELECT d.job_id, d.tenant, d.priority, d.next_attempt_at, d.declared_bytes, tu.start,
         tu.stride, tu.rank
    FROM turns AS tu CROSS JOIN LATERAL (
      SELECT j.job_id, j.tenant, j.priority, j.next_attempt_at, j.declared_bytes FROM jobs AS j
       WHERE j.tenant = tu.tenant AND j.priority = tu.priority AND j.state = 'queued'
         AND j.next_attempt_at <= %(now)s::float8 AND j.declared_bytes <= %(budget)s::bigint
         AND j.kind = ANY(tu.kinds)
       ORDER BY j.next_attempt_at, j.job_id
       LIMIT %(limit)s) AS d
), tagged AS MATERIALIZED (
  SELECT job_id, declared_bytes, rank,
         start + (row_number() OVER (PARTITION BY tenant
                                     ORDER BY priority, next_attempt_at, job_id) - 1) * stride AS tag
    FROM due
), candidates AS MATERIALIZED (
  SELECT job_id, declared_bytes, tag, rank FROM tagged ORDER BY tag, rank, job_id
   LIMIT 2 * %(limit)s
), locked AS MATERIALIZED (
  SELECT j.job_id FROM jobs AS j
   WHERE j.job_id = ANY(array(SELECT job_id FROM candidates)) AND j.state = 'queued'
     FOR UPDATE SKIP LOCKED
), ordered AS MATERIALIZED (
  SELECT c.job_id, c.declared_bytes, row_number() OVER (ORDER BY c.tag, c.rank, c.job_id) AS rn
    FROM candidates AS c JOIN locked AS l ON l.job_id = c.job_id
), picked (rn, budget, n, job_id, taken) AS (
  SELECT 0::bigint, %(budget)s::bigint, 0, NULL::text COLLATE "C", false
  UNION ALL
  SELECT o.rn, p.budget - CASE WHEN o.declared_bytes <= p.budget THEN o.declared_bytes ELSE 0 END,
         p.n + CASE WHEN o.declared_bytes <= p.budget THEN 1 ELSE 0 END,
         o.job_id, o.declared_bytes <= p.budget
    FROM picked AS p JOIN ordered AS o ON o.rn = p.rn + 1
   WHERE p.n < %(limit)s
), claimed AS (
  UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, lease_owner = %(owner)s,
         lease_expires = %(now)s::float8 + %(lease_s)s::float8, claimed_at = %(now)s::float8,
         first_claimed_at = coalesce(jobs.first_claimed_at, %(now)s::float8),
         queue_wait_ms = jobs.queue_wait_ms
           + greatest(0, (%(now)s::float8 - coalesce(jobs.queued_since, %(now)s::float8)) * 1000.0),
         queued_since = NULL, updated_at = %(now)s::float8
    FROM picked
   WHERE picked.taken AND jobs.job_id = picked.job_id
  RETURNING jobs.*, picked.rn AS claim_rn
)
SELECT c.*, s.artifact_id AS sig_artifact_id, s.sha256 AS sig_sha256, s.size AS sig_size,
       s.job_id AS sig_job_id, s.created_at AS sig_created_at
  FROM claimed AS c
  LEFT JOIN signatures AS s ON s.tenant = c.tenant AND s.sig_key = c.sig_key
 ORDER BY c.claim_rn;

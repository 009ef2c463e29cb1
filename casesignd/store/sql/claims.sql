-- Named statements of the SQLite store's claims among tenants (casesignd.store.claims).

-- name: pause_claims
INSERT OR IGNORE INTO pauses (tenant, kind, since, actor) VALUES (:tenant, :kind, :now, :actor);

-- name: resume_claims
DELETE FROM pauses WHERE tenant = :tenant AND kind = :kind;

-- name: list_pauses
SELECT tenant, kind, since, actor FROM pauses ORDER BY since, tenant, kind;

-- The tenants with queued jobs and their priorities, one (tenant, priority) after
-- another: each is one step through the index jobs_fair (a skip scan), so the claim
-- reads as many rows as there are such lanes, however deep each one is.
-- name: first_lane
SELECT tenant, priority FROM jobs INDEXED BY jobs_fair WHERE state = 'queued'
 ORDER BY tenant, priority LIMIT 1;

-- The next priority of the same tenant, else the next tenant's first: two seeks
-- (a row-value comparison would seek on the tenant alone and step through its rows).
-- name: next_lane
SELECT tenant, priority FROM (
  SELECT * FROM (SELECT tenant, priority FROM jobs INDEXED BY jobs_fair
                  WHERE state = 'queued' AND tenant = :tenant AND priority > :priority
                  ORDER BY priority LIMIT 1)
  UNION ALL
  SELECT * FROM (SELECT tenant, priority FROM jobs INDEXED BY jobs_fair
                  WHERE state = 'queued' AND tenant > :tenant
                  ORDER BY tenant, priority LIMIT 1))
 ORDER BY tenant, priority LIMIT 1;

-- A claim of a tenant's first due job of one priority that fits the byte budget, of
-- a kind this pool runs and not paused: its lease taken, the attempt number bumped
-- (it fences every later update). "Due" is a range of the index: a job scheduled
-- for later is never read.
-- name: claim_lane
UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_owner = :owner,
       lease_expires = :now + :lease_s, claimed_at = :now,
       first_claimed_at = coalesce(first_claimed_at, :now),
       queue_wait_ms = queue_wait_ms + max(0, (:now - coalesce(queued_since, :now)) * 1000.0),
       queued_since = NULL, updated_at = :now
 WHERE job_id = (SELECT job_id FROM jobs INDEXED BY jobs_fair
                  WHERE tenant = :tenant AND priority = :priority AND state = 'queued'
                    AND next_attempt_at <= :now AND declared_bytes <= :budget
                    AND kind IN (SELECT value FROM json_each(:kinds))
                    AND NOT EXISTS (SELECT 1 FROM pauses AS p
                                     WHERE p.tenant IN ('', jobs.tenant) AND p.kind IN ('', jobs.kind))
                  ORDER BY next_attempt_at, job_id LIMIT 1)
RETURNING *;

-- PostgreSQL: the data lifecycle's statements (casesignd.store.lifecycle): retention, legal holds,
-- erasure. A job "uses" an object when its input names the object's digest.

-- name: put_object
INSERT INTO objects (tenant, case_id, sha256, size, used_at)
VALUES (%(tenant)s, %(case_id)s, %(sha256)s, %(size)s, %(now)s)
ON CONFLICT (tenant, case_id, sha256) DO UPDATE SET used_at = greatest(objects.used_at, excluded.used_at),
                                                    size = excluded.size;

-- name: get_hold
SELECT tenant, case_id, placed_at FROM holds WHERE tenant = %(tenant)s AND case_id = %(case_id)s;

-- name: place_hold
INSERT INTO holds (tenant, case_id, placed_at) VALUES (%(tenant)s, %(case_id)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: lift_hold
DELETE FROM holds WHERE tenant = %(tenant)s AND case_id = %(case_id)s;

-- name: expire_jobs
-- Terminal jobs that ended before the cutoff, of cases under no hold and with no
-- webhook delivery still to send (its body is the job): "rejected" (failed for their
-- input) or the others.
DELETE FROM jobs WHERE job_id IN (
  SELECT j.job_id FROM jobs AS j
   WHERE j.state IN ('succeeded', 'failed', 'canceled') AND j.finished_at < %(cutoff)s
     AND (j.state = 'failed' AND coalesce(j.error_category, '') = 'permanent_input') = %(rejected)s
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = j.tenant AND h.case_id = j.case_id)
     AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS w
                      WHERE w.job_id = j.job_id AND w.state = 'pending')
   ORDER BY j.finished_at LIMIT %(limit)s FOR UPDATE OF j SKIP LOCKED)
RETURNING job_id, tenant, case_id, kind, state, attempt, input, input_digest, version, finished_at;

-- name: used_until
-- A removed job's end, kept with the objects it used (objects_s counts from it).
UPDATE objects SET used_at = greatest(used_at, %(finished_at)s)
 WHERE tenant = %(tenant)s AND case_id = %(case_id)s AND sha256 = %(sha256)s;

-- name: object_in_use
-- A job of the case that may still run, or that ended after the cutoff, uses it.
SELECT 1 FROM jobs AS j
 WHERE j.tenant = %(tenant)s AND j.case_id = %(case_id)s AND instr(j.input, %(sha256)s) > 0
   AND (j.state IN ('queued', 'running', 'retry_wait', 'failed') OR j.finished_at >= %(cutoff)s)
 LIMIT 1;

-- name: expire_objects
DELETE FROM objects WHERE (tenant, case_id, sha256) IN (
  SELECT o.tenant, o.case_id, o.sha256 FROM objects AS o
   WHERE o.used_at < %(cutoff)s
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = o.tenant AND h.case_id = o.case_id)
     AND NOT EXISTS (
       SELECT 1 FROM jobs AS j
        WHERE j.tenant = o.tenant AND j.case_id = o.case_id AND strpos(j.input, o.sha256) > 0
          AND (j.state IN ('queued', 'running', 'retry_wait', 'failed') OR j.finished_at >= %(cutoff)s))
   ORDER BY o.used_at LIMIT %(limit)s FOR UPDATE OF o SKIP LOCKED)
RETURNING tenant, case_id, sha256, size;

-- name: drop_object
DELETE FROM objects WHERE tenant = %(tenant)s AND case_id = %(case_id)s AND sha256 = %(sha256)s
RETURNING tenant, case_id, sha256, size;

-- name: expire_artifacts
-- Artifacts made before the cutoff, of cases under no hold, that no job waiting to
-- run (an extend_signature) reads.
DELETE FROM artifacts WHERE artifact_id IN (
  SELECT a.artifact_id FROM artifacts AS a
   WHERE a.created_at < %(cutoff)s
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = a.tenant AND h.case_id = a.case_id)
     AND NOT EXISTS (
       SELECT 1 FROM jobs AS j
        WHERE j.tenant = a.tenant AND j.kind = 'extend_signature'
          AND j.state IN ('queued', 'running', 'retry_wait') AND strpos(j.input, a.artifact_id) > 0)
   ORDER BY a.created_at LIMIT %(limit)s FOR UPDATE OF a SKIP LOCKED)
RETURNING artifact_id, tenant, case_id, job_id, sha256, size;

-- name: drop_artifact_bytes
DELETE FROM artifact_data WHERE artifact_id = %(artifact_id)s;

-- name: drop_artifact_signatures
DELETE FROM signatures WHERE tenant = %(tenant)s AND artifact_id = %(artifact_id)s;

-- name: case_known
-- Whether the tenant has the case at all: a job, an object or an artifact of it.
SELECT EXISTS (SELECT 1 FROM jobs WHERE tenant = %(tenant)s AND case_id = %(case_id)s)
    OR EXISTS (SELECT 1 FROM objects WHERE tenant = %(tenant)s AND case_id = %(case_id)s)
    OR EXISTS (SELECT 1 FROM artifacts WHERE tenant = %(tenant)s AND case_id = %(case_id)s)
       AS known;

-- name: case_running
SELECT count(*) AS n FROM jobs
 WHERE tenant = %(tenant)s AND case_id = %(case_id)s AND state = 'running';

-- name: erase_cancel
WITH waiting AS (
  SELECT job_id, state FROM jobs
   WHERE tenant = %(tenant)s AND case_id = %(case_id)s AND state IN ('queued', 'retry_wait')
   FOR UPDATE
)
UPDATE jobs SET state = 'canceled', finished_at = %(now)s::float8, updated_at = %(now)s::float8,
       queue_wait_ms = jobs.queue_wait_ms
         + greatest(0, (%(now)s::float8 - coalesce(jobs.queued_since, %(now)s::float8)) * 1000.0),
       queued_since = NULL
  FROM waiting
 WHERE jobs.job_id = waiting.job_id
RETURNING jobs.*, waiting.state AS old_state;

-- name: erase_objects
DELETE FROM objects WHERE tenant = %(tenant)s AND case_id = %(case_id)s
RETURNING tenant, case_id, sha256, size;

-- name: erase_artifacts
DELETE FROM artifacts WHERE tenant = %(tenant)s AND case_id = %(case_id)s
RETURNING artifact_id, tenant, case_id, job_id, sha256, size;

-- name: disk_use
SELECT (SELECT coalesce(sum(size), 0) FROM objects) AS objects,
       (SELECT coalesce(sum(a.size), 0) FROM artifacts AS a
         WHERE NOT EXISTS (SELECT 1 FROM artifact_data AS d
                            WHERE d.artifact_id = a.artifact_id)) AS artifacts;

-- name: mark_result_removed
-- The succeeded jobs whose result names a removed artifact (its own job, and those of
-- its case that a recorded signature answered) keep its digest and size and say
-- when it went: the job resource then gives no link, and store check knows why.
UPDATE jobs SET result = jsonb_set(result::jsonb, '{artifact,removed_at}',
                                   to_jsonb(%(now)s::double precision))::text
-- By key and by the case's index, never a scan of the tenant's jobs.
 WHERE job_id IN (SELECT %(job_id)s::text UNION ALL
                  SELECT job_id FROM jobs WHERE tenant = %(tenant)s AND case_id = %(case_id)s)
   AND tenant = %(tenant)s
   AND state = 'succeeded' AND result::jsonb #>> '{artifact,artifact_id}' = %(artifact_id)s
   AND result::jsonb #> '{artifact,removed_at}' IS NULL;

-- Storage encryption's data keys (casesignd.store.data_keys).
-- name: put_data_key
INSERT INTO data_keys (owner, key_id, wrapped, created_at)
VALUES (%(owner)s, %(key_id)s, %(wrapped)s, %(now)s) ON CONFLICT DO NOTHING;

-- name: get_data_key
SELECT owner, key_id, wrapped FROM data_keys WHERE owner = %(owner)s;

-- name: data_keys_to_rewrap
SELECT owner, key_id, wrapped FROM data_keys
 WHERE owner > %(after)s AND key_id <> %(current)s ORDER BY owner LIMIT %(limit)s;

-- name: rewrap_data_key
UPDATE data_keys SET key_id = %(key_id)s, wrapped = %(wrapped)s
 WHERE owner = %(owner)s AND key_id = %(old_key_id)s;

-- name: inline_keys_to_rewrap
SELECT 'artifact:' || artifact_id AS owner, key_id, wrapped_key AS wrapped FROM artifact_data
 WHERE artifact_id > %(after)s AND key_id IS NOT NULL AND key_id <> %(current)s
 ORDER BY artifact_id LIMIT %(limit)s;

-- name: rewrap_inline_key
UPDATE artifact_data SET key_id = %(key_id)s, wrapped_key = %(wrapped)s
 WHERE artifact_id = %(artifact_id)s AND key_id = %(old_key_id)s;

-- name: data_key_ids
SELECT key_id, sum(n) AS n FROM (
  SELECT key_id, count(*) AS n FROM data_keys GROUP BY key_id
  UNION ALL
  SELECT key_id, count(*) AS n FROM artifact_data WHERE key_id IS NOT NULL GROUP BY key_id) AS k
 GROUP BY key_id ORDER BY key_id;

-- name: drop_data_key
DELETE FROM data_keys WHERE owner = %(owner)s;

-- An artifact's key written for a publication a crash cut short of its record (the
-- start-up sweep): a publication in flight writes its key again with its record.
-- One scan of data_keys, at start.
-- name: drop_unrecorded_artifact_keys
DELETE FROM data_keys WHERE substr(owner, 1, 9) = 'artifact:' AND created_at < %(before)s
   AND NOT EXISTS (SELECT 1 FROM artifacts
                    WHERE artifacts.artifact_id = substr(data_keys.owner, 10));

-- An object's key goes with the last case that holds it (a blob is stored once).
-- name: drop_object_key
DELETE FROM data_keys WHERE owner = 'object:' || %(sha256)s
   AND NOT EXISTS (SELECT 1 FROM objects WHERE sha256 = %(sha256)s);

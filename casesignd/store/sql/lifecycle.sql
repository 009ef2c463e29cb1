-- The data lifecycle's statements (casesignd.store.lifecycle): retention, legal holds,
-- erasure. A job "uses" an object when its input names the object's digest.

-- name: put_object
INSERT INTO objects (tenant, case_id, sha256, size, used_at)
VALUES (:tenant, :case_id, :sha256, :size, :now)
ON CONFLICT (tenant, case_id, sha256) DO UPDATE SET used_at = max(used_at, excluded.used_at),
                                                    size = excluded.size;

-- name: get_hold
SELECT tenant, case_id, placed_at FROM holds WHERE tenant = :tenant AND case_id = :case_id;

-- name: place_hold
INSERT OR IGNORE INTO holds (tenant, case_id, placed_at) VALUES (:tenant, :case_id, :now);

-- name: lift_hold
DELETE FROM holds WHERE tenant = :tenant AND case_id = :case_id;

-- name: expire_jobs
-- Terminal jobs that ended before the cutoff, of cases under no hold and with no
-- webhook delivery still to send (its body is the job): "rejected" (failed for their
-- input) or the others.
DELETE FROM jobs WHERE job_id IN (
  SELECT j.job_id FROM jobs AS j
   WHERE j.state IN ('succeeded', 'failed', 'canceled') AND j.finished_at < :cutoff
     AND (j.state = 'failed' AND coalesce(j.error_category, '') = 'permanent_input') = :rejected
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = j.tenant AND h.case_id = j.case_id)
     AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS w
                      WHERE w.job_id = j.job_id AND w.state = 'pending')
   ORDER BY j.finished_at LIMIT :limit)
RETURNING job_id, tenant, case_id, kind, state, attempt, input, input_digest, version, finished_at;

-- name: used_until
-- A removed job's end, kept with the objects it used (objects_s counts from it).
UPDATE objects SET used_at = max(used_at, :finished_at)
 WHERE tenant = :tenant AND case_id = :case_id AND sha256 = :sha256;

-- name: object_in_use
-- A job of the case that may still run, or that ended after the cutoff, uses it.
SELECT 1 FROM jobs AS j
 WHERE j.tenant = :tenant AND j.case_id = :case_id AND instr(j.input, :sha256) > 0
   AND (j.state IN ('queued', 'running', 'retry_wait', 'failed') OR j.finished_at >= :cutoff)
 LIMIT 1;

-- name: expire_objects
DELETE FROM objects WHERE rowid IN (
  SELECT o.rowid FROM objects AS o
   WHERE o.used_at < :cutoff
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = o.tenant AND h.case_id = o.case_id)
     AND NOT EXISTS (
       SELECT 1 FROM jobs AS j
        WHERE j.tenant = o.tenant AND j.case_id = o.case_id AND instr(j.input, o.sha256) > 0
          AND (j.state IN ('queued', 'running', 'retry_wait', 'failed') OR j.finished_at >= :cutoff))
   ORDER BY o.used_at LIMIT :limit)
RETURNING tenant, case_id, sha256, size;

-- name: drop_object
DELETE FROM objects WHERE tenant = :tenant AND case_id = :case_id AND sha256 = :sha256
RETURNING tenant, case_id, sha256, size;

-- name: expire_artifacts
-- Artifacts made before the cutoff, of cases under no hold, that no job waiting to
-- run (an extend_signature) reads.
DELETE FROM artifacts WHERE artifact_id IN (
  SELECT a.artifact_id FROM artifacts AS a
   WHERE a.created_at < :cutoff
     AND NOT EXISTS (SELECT 1 FROM holds AS h WHERE h.tenant = a.tenant AND h.case_id = a.case_id)
     AND NOT EXISTS (
       SELECT 1 FROM jobs AS j
        WHERE j.tenant = a.tenant AND j.kind = 'extend_signature'
          AND j.state IN ('queued', 'running', 'retry_wait') AND instr(j.input, a.artifact_id) > 0)
   ORDER BY a.created_at LIMIT :limit)
RETURNING artifact_id, tenant, case_id, job_id, sha256, size;

-- name: drop_artifact_bytes
DELETE FROM artifact_data WHERE artifact_id = :artifact_id;

-- name: drop_artifact_signatures
DELETE FROM signatures WHERE tenant = :tenant AND artifact_id = :artifact_id;

-- name: case_known
-- Whether the tenant has the case at all: a job, an object or an artifact of it.
SELECT EXISTS (SELECT 1 FROM jobs WHERE tenant = :tenant AND case_id = :case_id)
    OR EXISTS (SELECT 1 FROM objects WHERE tenant = :tenant AND case_id = :case_id)
    OR EXISTS (SELECT 1 FROM artifacts WHERE tenant = :tenant AND case_id = :case_id) AS known;

-- name: case_running
SELECT count(*) AS n FROM jobs
 WHERE tenant = :tenant AND case_id = :case_id AND state = 'running';

-- name: erase_cancel
UPDATE jobs SET state = 'canceled', finished_at = :now, updated_at = :now,
       queue_wait_ms = queue_wait_ms + max(0, (:now - coalesce(queued_since, :now)) * 1000.0),
       queued_since = NULL
 WHERE tenant = :tenant AND case_id = :case_id AND state IN ('queued', 'retry_wait')
RETURNING *;

-- name: erase_objects
DELETE FROM objects WHERE tenant = :tenant AND case_id = :case_id
RETURNING tenant, case_id, sha256, size;

-- name: erase_artifacts
DELETE FROM artifacts WHERE tenant = :tenant AND case_id = :case_id
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
-- By key and by the case's index, never a scan of the tenant's jobs.
UPDATE jobs SET result = json_set(result, '$.artifact.removed_at', :now)
 WHERE job_id IN (SELECT :job_id UNION ALL
                  SELECT job_id FROM jobs WHERE tenant = :tenant AND case_id = :case_id)
   AND tenant = :tenant AND state = 'succeeded'
   AND json_extract(result, '$.artifact.artifact_id') = :artifact_id
   AND json_extract(result, '$.artifact.removed_at') IS NULL;

-- Storage encryption's data keys (casesignd.store.data_keys).
-- name: put_data_key
INSERT OR IGNORE INTO data_keys (owner, key_id, wrapped, created_at)
VALUES (:owner, :key_id, :wrapped, :now);

-- name: get_data_key
SELECT owner, key_id, wrapped FROM data_keys WHERE owner = :owner;

-- name: data_keys_to_rewrap
SELECT owner, key_id, wrapped FROM data_keys
 WHERE owner > :after AND key_id <> :current ORDER BY owner LIMIT :limit;

-- name: rewrap_data_key
UPDATE data_keys SET key_id = :key_id, wrapped = :wrapped
 WHERE owner = :owner AND key_id = :old_key_id;

-- name: inline_keys_to_rewrap
SELECT 'artifact:' || artifact_id AS owner, key_id, wrapped_key AS wrapped FROM artifact_data
 WHERE artifact_id > :after AND key_id IS NOT NULL AND key_id <> :current
 ORDER BY artifact_id LIMIT :limit;

-- name: rewrap_inline_key
UPDATE artifact_data SET key_id = :key_id, wrapped_key = :wrapped
 WHERE artifact_id = :artifact_id AND key_id = :old_key_id;

-- name: data_key_ids
SELECT key_id, sum(n) AS n FROM (
  SELECT key_id, count(*) AS n FROM data_keys GROUP BY key_id
  UNION ALL
  SELECT key_id, count(*) AS n FROM artifact_data WHERE key_id IS NOT NULL GROUP BY key_id) AS k
 GROUP BY key_id ORDER BY key_id;

-- name: drop_data_key
DELETE FROM data_keys WHERE owner = :owner;

-- An artifact's key written for a publication a crash cut short of its record (the
-- start-up sweep): a publication in flight writes its key again with its record.
-- One scan of data_keys, at start.
-- name: drop_unrecorded_artifact_keys
DELETE FROM data_keys WHERE substr(owner, 1, 9) = 'artifact:' AND created_at < :before
   AND NOT EXISTS (SELECT 1 FROM artifacts
                    WHERE artifacts.artifact_id = substr(data_keys.owner, 10));

-- An object's key goes with the last case that holds it (a blob is stored once).
-- name: drop_object_key
DELETE FROM data_keys WHERE owner = 'object:' || :sha256
   AND NOT EXISTS (SELECT 1 FROM objects WHERE sha256 = :sha256);

-- Named statements that the tools (store check, store copy) read a SQLite store with,
-- in one read transaction. Each block starts with "-- name: NAME".

-- name: schema_version
PRAGMA user_version;

-- name: events
SELECT * FROM events ORDER BY seq;

-- The chain's head: its last event (SQLite keeps no head of its own).
-- name: chain_head
SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1;

-- name: job_states
SELECT state, count(*) AS n FROM jobs GROUP BY state;

-- What the triggers keep (0002_waiting_counter.sql, 0004_state_counters.sql).
-- name: kept_counts
SELECT name, value FROM counters;

-- Every artifact the store names, in id order: its record, or a recorded signature's
-- when no record was written yet (a finish that did not commit), and whether its bytes
-- are in the store.
-- name: artifact_records
SELECT a.artifact_id, a.sha256, a.size, d.artifact_id IS NOT NULL AS inline
  FROM artifacts AS a LEFT JOIN artifact_data AS d ON d.artifact_id = a.artifact_id
UNION ALL
SELECT s.artifact_id, s.sha256, s.size, d.artifact_id IS NOT NULL AS inline
  FROM signatures AS s LEFT JOIN artifact_data AS d ON d.artifact_id = s.artifact_id
 WHERE NOT EXISTS (SELECT 1 FROM artifacts AS a WHERE a.artifact_id = s.artifact_id)
ORDER BY 1;

-- Whether anything names an artifact: asked again, outside the snapshot, of a file
-- that had no record in it (its job may have committed since).
-- name: artifact_named
SELECT 1 AS named WHERE EXISTS (SELECT 1 FROM artifacts WHERE artifact_id = :artifact_id)
   OR EXISTS (SELECT 1 FROM signatures WHERE artifact_id = :artifact_id);

-- name: inline_data
SELECT data, key_id, wrapped_key FROM artifact_data WHERE artifact_id = :artifact_id;

-- Storage encryption: a sealed file's wrapped data key, and the key ids the store needs.
-- name: data_key
SELECT owner, key_id, wrapped FROM data_keys WHERE owner = :owner;

-- name: data_key_ids
SELECT key_id, sum(n) AS n FROM (
  SELECT key_id, count(*) AS n FROM data_keys GROUP BY key_id
  UNION ALL
  SELECT key_id, count(*) AS n FROM artifact_data WHERE key_id IS NOT NULL GROUP BY key_id) AS k
 GROUP BY key_id ORDER BY key_id;

-- name: get_artifact
SELECT artifact_id FROM artifacts WHERE artifact_id = :artifact_id;

-- A succeeded job whose result names an artifact that has no record, and that
-- no removal marked (retention or an erasure sets removed_at).
-- name: results_unrecorded
SELECT job_id, json_extract(result, '$.artifact.artifact_id') AS artifact_id FROM jobs
 WHERE state = 'succeeded' AND json_extract(result, '$.artifact.artifact_id') IS NOT NULL
   AND json_extract(result, '$.artifact.removed_at') IS NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS a
                    WHERE a.artifact_id = json_extract(jobs.result, '$.artifact.artifact_id'))
 ORDER BY job_id;

-- An artifact marked renewed by one that has no record.
-- name: renewals_unrecorded
SELECT artifact_id, renewed_by FROM artifacts AS a
 WHERE renewed_by IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS b WHERE b.artifact_id = a.renewed_by)
 ORDER BY artifact_id;

-- The jobs that may still read their inputs (a failed one may be retried), of the
-- kinds whose inputs name stored things. A kiosk request's document is an object too
-- once its job did not succeed at once (kiosk.py keeps it for the retry).
-- name: jobs_with_inputs
SELECT job_id, tenant, case_id, kind, state, input FROM jobs
 WHERE state IN ('queued', 'running', 'retry_wait', 'failed')
   AND kind IN ('sign_case', 'extend_signature')
 ORDER BY job_id;


-- What a store holds, as far as a copy goes (store copy refuses to mix two chains).
-- name: holding
SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM events) AS events,
       (SELECT seq FROM events ORDER BY seq DESC LIMIT 1) AS head_seq,
       (SELECT hash FROM events ORDER BY seq DESC LIMIT 1) AS head_hash,
       EXISTS (SELECT 1 FROM signatures) OR EXISTS (SELECT 1 FROM artifacts)
         OR EXISTS (SELECT 1 FROM artifact_data) AS other_rows;

-- name: tables
SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name;

-- name: columns
SELECT name FROM pragma_table_info(:table) ORDER BY cid;

-- Whether a removal (retention or an erasure) recorded an object of a case: a job
-- that still names it is sound, since what went was removed, not lost (unless it
-- was uploaded again since: then the store says it is there).
-- name: object_removed
SELECT 1 AS removed FROM events
 WHERE type = 'object_removed' AND tenant = :tenant AND case_id = :case_id
   AND json_extract(detail, '$.sha256') = :sha256
   AND NOT EXISTS (SELECT 1 FROM objects AS o WHERE o.tenant = :tenant
                    AND o.case_id = :case_id AND o.sha256 = :sha256)
 LIMIT 1;

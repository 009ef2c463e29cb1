-- Named statements that the tools (store check, store copy) read a PostgreSQL store
-- with, in one read-only REPEATABLE READ transaction: the same names as sql/inspect.sql.

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_version;

-- name: events
SELECT * FROM events ORDER BY seq;

-- The head every writer chains after (audit_head), which must be the last event.
-- name: chain_head
SELECT seq, hash FROM audit_head WHERE id = 1;

-- name: job_states
SELECT state, count(*) AS n FROM jobs GROUP BY state;

-- What the writers keep (job_counts), under the SQLite counters' names.
-- name: kept_counts
SELECT 'state:' || state AS name, n AS value FROM job_counts;

-- Every artifact the store names, in id order (byte order, as Python's): its record,
-- or a recorded signature's when no record was written yet, and whether its bytes are
-- in the store.
-- name: artifact_records
SELECT artifact_id COLLATE "C" AS artifact_id, sha256, size, inline FROM (
  SELECT a.artifact_id, a.sha256, a.size, d.artifact_id IS NOT NULL AS inline
    FROM artifacts AS a LEFT JOIN artifact_data AS d ON d.artifact_id = a.artifact_id
  UNION ALL
  SELECT s.artifact_id, s.sha256, s.size, d.artifact_id IS NOT NULL AS inline
    FROM signatures AS s LEFT JOIN artifact_data AS d ON d.artifact_id = s.artifact_id
   WHERE NOT EXISTS (SELECT 1 FROM artifacts AS a WHERE a.artifact_id = s.artifact_id)
) AS named
ORDER BY 1;

-- Whether anything names an artifact, asked again outside the snapshot.
-- name: artifact_named
SELECT 1 AS named WHERE EXISTS (SELECT 1 FROM artifacts WHERE artifact_id = %(artifact_id)s)
   OR EXISTS (SELECT 1 FROM signatures WHERE artifact_id = %(artifact_id)s);

-- name: inline_data
SELECT data, key_id, wrapped_key FROM artifact_data WHERE artifact_id = %(artifact_id)s;

-- Storage encryption: a sealed file's wrapped data key, and the key ids the store needs.
-- name: data_key
SELECT owner, key_id, wrapped FROM data_keys WHERE owner = %(owner)s;

-- name: data_key_ids
SELECT key_id, sum(n) AS n FROM (
  SELECT key_id, count(*) AS n FROM data_keys GROUP BY key_id
  UNION ALL
  SELECT key_id, count(*) AS n FROM artifact_data WHERE key_id IS NOT NULL GROUP BY key_id) AS k
 GROUP BY key_id ORDER BY key_id;

-- name: get_artifact
SELECT artifact_id FROM artifacts WHERE artifact_id = %(artifact_id)s;

-- name: results_unrecorded
SELECT job_id, result::json #>> '{artifact,artifact_id}' AS artifact_id FROM jobs
 WHERE state = 'succeeded' AND result::json #>> '{artifact,artifact_id}' IS NOT NULL
   AND result::json #> '{artifact,removed_at}' IS NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS a
                    WHERE a.artifact_id = jobs.result::json #>> '{artifact,artifact_id}')
 ORDER BY job_id;

-- name: renewals_unrecorded
SELECT artifact_id, renewed_by FROM artifacts AS a
 WHERE renewed_by IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS b WHERE b.artifact_id = a.renewed_by)
 ORDER BY artifact_id;

-- name: jobs_with_inputs
SELECT job_id, tenant, case_id, kind, state, input FROM jobs
 WHERE state IN ('queued', 'running', 'retry_wait', 'failed')
   AND kind IN ('sign_case', 'extend_signature')
 ORDER BY job_id;


-- What a store holds, as far as a copy goes (store copy refuses to mix two chains).
-- name: holding
SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM events) AS events,
       (SELECT seq FROM audit_head WHERE id = 1) AS head_seq,
       (SELECT hash FROM audit_head WHERE id = 1) AS head_hash,
       EXISTS (SELECT 1 FROM signatures) OR EXISTS (SELECT 1 FROM artifacts)
         OR EXISTS (SELECT 1 FROM artifact_data) AS other_rows;

-- name: tables
SELECT table_name AS name FROM information_schema.tables
 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name;

-- name: columns
SELECT column_name AS name FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = %(table)s ORDER BY ordinal_position;

-- Whether a removal (retention or an erasure) recorded an object of a case: a job
-- that still names it is sound, since what went was removed, not lost (unless it
-- was uploaded again since: then the store says it is there).
-- name: object_removed
SELECT 1 AS removed FROM events
 WHERE type = 'object_removed' AND tenant = %(tenant)s AND case_id = %(case_id)s
   AND detail::jsonb ->> 'sha256' = %(sha256)s
   AND NOT EXISTS (SELECT 1 FROM objects AS o WHERE o.tenant = %(tenant)s
                    AND o.case_id = %(case_id)s AND o.sha256 = %(sha256)s)
 LIMIT 1;

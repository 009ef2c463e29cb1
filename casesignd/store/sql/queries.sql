-- Named statements of the SQLite store. Each block starts with "-- name: NAME".

-- name: find_idem
SELECT * FROM jobs WHERE tenant = :tenant AND idem_key = :idem_key;

-- Kept by triggers (0002_waiting_counter.sql): no scan of a deep queue per admission.
-- name: queue_depth
SELECT value FROM counters WHERE name = 'waiting';

-- A scheduled job is queued from its not_before on: no claim reads it before then,
-- and its queue wait counts from then.
-- name: insert_job
INSERT INTO jobs (job_id, tenant, kind, case_id, idem_key, fingerprint, input, input_digest,
                  version, declared_bytes, state, created_at, admitted_at, admission_ms,
                  queued_since, next_attempt_at, correlation_id, updated_at, sig_key,
                  traceparent, priority, not_before)
VALUES (:job_id, :tenant, :kind, :case_id, :idem_key, :fingerprint, :input, :input_digest,
        :version, :declared_bytes, 'queued', :created_at, :now, :admission_ms,
        max(:now, coalesce(:not_before, :now)), max(:now, coalesce(:not_before, :now)),
        :correlation_id, :now, :sig_key, :traceparent, :priority, :not_before)
RETURNING *;

-- A kiosk request that signed, written when done: the row that insert_job, claim_job
-- and finish leave, in one statement (the flight's clocks; :now is the finish).
-- name: insert_flight_succeeded
INSERT INTO jobs (job_id, tenant, kind, case_id, idem_key, fingerprint, input, input_digest,
                  version, declared_bytes, state, attempt, created_at, admitted_at,
                  admission_ms, claimed_at, first_claimed_at, finished_at, next_attempt_at,
                  queue_wait_ms, processing_ms, result, correlation_id, updated_at, sig_key,
                  traceparent)
VALUES (:job_id, :tenant, :kind, :case_id, :idem_key, :fingerprint, :input, :input_digest,
        :version, :declared_bytes, 'succeeded', 1, :created_at, :admitted_at,
        :admission_ms, :claimed_at, :claimed_at, :now, :admitted_at,
        max(0, (:claimed_at - :admitted_at) * 1000.0), max(0, (:now - :claimed_at) * 1000.0),
        :result, :correlation_id, :now, :sig_key, :traceparent)
RETURNING *;

-- The kiosk path takes a job it just admitted (or finds queued) without queueing it.
-- name: claim_job
UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_owner = :owner,
       lease_expires = :now + :lease_s, claimed_at = :now,
       first_claimed_at = coalesce(first_claimed_at, :now),
       queue_wait_ms = queue_wait_ms + max(0, (:now - coalesce(queued_since, :now)) * 1000.0),
       queued_since = NULL, updated_at = :now
 WHERE job_id = :job_id AND state = 'queued'
RETURNING *;

-- name: renew
UPDATE jobs SET lease_expires = :now + :lease_s, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND lease_owner = :owner AND state = 'running';

-- name: finish
UPDATE jobs SET state = 'succeeded', result = :result, finished_at = :now,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING *;

-- A finish whose signature was recorded before names the recorded one.
-- name: set_result
UPDATE jobs SET result = :result WHERE job_id = :job_id RETURNING *;

-- name: retry_later
UPDATE jobs SET state = 'retry_wait', next_attempt_at = :next_at, failures = failures + :count,
       error_code = :code, error_category = NULL,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING *;

-- name: fail
UPDATE jobs SET state = 'failed', failures = failures + 1, error_category = :category,
       error_code = :code, result = :result, finished_at = :now,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING *;

-- name: release
UPDATE jobs SET state = 'queued', next_attempt_at = :now, queued_since = :now,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING *;

-- name: expired_leases
SELECT * FROM jobs WHERE state = 'running' AND lease_expires < :now ORDER BY lease_expires LIMIT :cap;

-- name: all_running
SELECT * FROM jobs WHERE state = 'running' ORDER BY job_id;

-- name: reclaim
UPDATE jobs SET state = 'queued', next_attempt_at = :now, queued_since = :now,
       lost_leases = lost_leases + 1,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND state = 'running'
RETURNING *;

-- name: fail_lost
UPDATE jobs SET state = 'failed', lost_leases = lost_leases + 1, error_category = 'lost',
       error_code = 'lease_lost', finished_at = :now,
       processing_ms = processing_ms + max(0, (:now - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = :now
 WHERE job_id = :job_id AND attempt = :attempt AND state = 'running'
RETURNING *;

-- name: due_retries
SELECT * FROM jobs WHERE state = 'retry_wait' AND next_attempt_at <= :now
 ORDER BY next_attempt_at LIMIT :cap;

-- name: requeue
UPDATE jobs SET state = 'queued', queued_since = :now, updated_at = :now
 WHERE job_id = :job_id AND state = 'retry_wait'
RETURNING *;

-- name: cancel
UPDATE jobs SET state = 'canceled', finished_at = :now, updated_at = :now,
       queue_wait_ms = queue_wait_ms + max(0, (:now - coalesce(queued_since, :now)) * 1000.0),
       queued_since = NULL
 WHERE job_id = :job_id AND tenant = :tenant AND state IN ('queued', 'retry_wait')
RETURNING *;

-- name: replay
UPDATE jobs SET state = 'queued', series = series + 1, failures = 0, lost_leases = 0,
       error_category = NULL, error_code = NULL, result = NULL, finished_at = NULL,
       next_attempt_at = :now, queued_since = :now, updated_at = :now
 WHERE job_id = :job_id AND tenant = :tenant AND state = 'failed'
   AND (SELECT value FROM counters WHERE name = 'waiting') < :max_queue_depth
RETURNING *;

-- name: get_job
SELECT * FROM jobs WHERE job_id = :job_id AND tenant = :tenant;

-- name: get_job_any
SELECT * FROM jobs WHERE job_id = :job_id;

-- name: list_jobs
SELECT * FROM jobs WHERE tenant = :tenant AND job_id < :cursor
   AND (:kind IS NULL OR kind = :kind)
 ORDER BY job_id DESC LIMIT :limit;

-- name: list_jobs_state
SELECT * FROM jobs WHERE tenant = :tenant AND state IN (SELECT value FROM json_each(:states))
   AND job_id < :cursor AND (:kind IS NULL OR kind = :kind)
 ORDER BY job_id DESC LIMIT :limit;

-- A case has few jobs: found by its index (jobs_case), then sorted. Named, since the
-- planner would rather walk all the tenant's jobs in order (jobs_tenant).
-- name: list_jobs_case
SELECT * FROM jobs INDEXED BY jobs_case WHERE tenant = :tenant AND case_id = :case_id AND job_id < :cursor
   AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
   AND (:kind IS NULL OR kind = :kind)
 ORDER BY job_id DESC LIMIT :limit;

-- The console's summary (GET /v1/stats): a tenant's jobs that wait, run or failed,
-- counted by index (jobs_tenant_state), with the oldest wait.
-- name: tenant_live
SELECT state, count(*) AS n, min(queued_since) AS oldest FROM jobs
 WHERE tenant = :tenant AND state IN ('queued', 'retry_wait', 'running', 'failed')
 GROUP BY state;

-- ... and the clocks of its jobs that ended since :since, per bucket and state. Only
-- the window's rows are read (jobs_finished, named: the planner would rather take
-- jobs_tenant_state, every job the tenant ever finished).
-- name: tenant_ended
SELECT CAST((finished_at - :since) / :bucket_s AS INTEGER) AS bucket, state, count(*) AS n,
       avg(admission_ms) AS admission_mean, max(admission_ms) AS admission_max,
       avg(queue_wait_ms) AS queue_wait_mean, max(queue_wait_ms) AS queue_wait_max,
       avg(processing_ms) AS processing_mean, max(processing_ms) AS processing_max,
       avg((finished_at - created_at) * 1000.0) AS total_mean,
       max((finished_at - created_at) * 1000.0) AS total_max
  FROM jobs INDEXED BY jobs_finished
 WHERE finished_at >= :since AND state IN ('succeeded', 'failed', 'canceled')
   AND tenant = :tenant
 GROUP BY bucket, state;

-- The audit chain's last events (GET /v1/audit/head), newest first.
-- name: chain_tail
SELECT * FROM events ORDER BY seq DESC LIMIT :limit;

-- The events of a tenant's newest jobs, each found by its job (events_job).
-- name: tenant_recent_events
SELECT * FROM events
 WHERE job_id IN (SELECT job_id FROM jobs WHERE tenant = :tenant
                   ORDER BY job_id DESC LIMIT :jobs)
   AND tenant = :tenant
 ORDER BY seq;

-- name: event_hashes
SELECT seq, hash FROM events WHERE seq IN (SELECT value FROM json_each(:seqs));

-- name: insert_event
INSERT INTO events (seq, event_id, job_id, tenant, case_id, type, actor, at, attempt,
                    input_digest, policy_version, detail, prev_hash, hash)
VALUES (:seq, :event_id, :job_id, :tenant, :case_id, :type, :actor, :at, :attempt,
        :input_digest, :policy_version, :detail, :prev_hash, :hash);

-- name: chain_head
SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1;

-- name: job_events
SELECT * FROM events WHERE job_id = :job_id AND tenant = :tenant ORDER BY seq;

-- name: state_counts
SELECT substr(name, 7) AS state, value AS n FROM counters
 WHERE name LIKE 'state:%' AND value > 0;

-- name: oldest_queued
SELECT min(queued_since) FROM jobs WHERE state = 'queued';

-- name: kiosk_lookup
-- One read for a kiosk request: the job its idempotency key names, if any, and the
-- signature recorded for its signature key, if any.
SELECT (SELECT job_id FROM jobs WHERE tenant = :tenant AND idem_key = :idem_key) AS job_id,
       s.artifact_id, s.sha256, s.size
  FROM (SELECT 1) LEFT JOIN signatures AS s ON s.tenant = :tenant AND s.sig_key = :sig_key;

-- name: get_signature
SELECT * FROM signatures WHERE tenant = :tenant AND sig_key = :sig_key;

-- name: put_signature
INSERT OR IGNORE INTO signatures (tenant, sig_key, artifact_id, sha256, size, job_id, created_at)
VALUES (:tenant, :sig_key, :artifact_id, :sha256, :size, :job_id, :now);

-- name: put_artifact
INSERT OR IGNORE INTO artifacts (artifact_id, tenant, case_id, job_id, sha256, size, media_type,
                                 created_at, timestamp_expires_at)
VALUES (:artifact_id, :tenant, :case_id, :job_id, :sha256, :size, :media_type, :now,
        :timestamp_expires_at);

-- name: mark_renewed
UPDATE artifacts SET renewed_by = :renewed_by
WHERE artifact_id = :artifact_id AND tenant = :tenant AND renewed_by IS NULL;

-- name: due_renewals
SELECT artifact_id, tenant, timestamp_expires_at FROM artifacts
WHERE timestamp_expires_at IS NOT NULL AND renewed_by IS NULL AND timestamp_expires_at <= :before
ORDER BY timestamp_expires_at LIMIT :limit;

-- name: get_artifact
SELECT * FROM artifacts WHERE artifact_id = :artifact_id;

-- name: put_artifact_data
INSERT OR IGNORE INTO artifact_data (artifact_id, data, key_id, wrapped_key)
VALUES (:artifact_id, :data, :key_id, :wrapped_key);

-- name: get_artifact_data
SELECT data, key_id, wrapped_key FROM artifact_data WHERE artifact_id = :artifact_id;

-- name: schema_version
PRAGMA user_version;

-- The webhook outbox (casesignd.store.outbox).
-- name: insert_delivery
INSERT INTO webhook_deliveries (delivery_id, tenant, job_id, event, endpoint, created_at,
                                next_attempt_at, updated_at)
VALUES (:delivery_id, :tenant, :job_id, :event, :endpoint, :now, :now, :now);

-- A lease on due deliveries, like a claim: the attempt number bumps. Tenants take
-- turns (each one's oldest, then each one's second...), so a tenant whose receiver is
-- slow or down and whose deliveries pile up never holds another's back. The tenants
-- with pending deliveries are found by skipping through the (tenant, next_attempt_at,
-- delivery_id) index, and each one's oldest :limit due ones read from it: the cost
-- grows with the tenants, not with their backlogs. A tenant takes at most its room:
-- :rooms (a JSON object, tenant to room) or else :per_tenant, so that one whose
-- receiver hangs holds only so many of the sender's places.
-- name: take_deliveries
WITH RECURSIVE tenants(t) AS (
  SELECT min(tenant) FROM webhook_deliveries WHERE state = 'pending'
  UNION ALL
  SELECT (SELECT min(tenant) FROM webhook_deliveries WHERE state = 'pending' AND tenant > t)
    FROM tenants WHERE t IS NOT NULL)
UPDATE webhook_deliveries SET attempts = attempts + 1, lease_owner = :owner,
       lease_expires = :now + :lease_s, updated_at = :now
 WHERE delivery_id IN (
   SELECT delivery_id FROM (
     SELECT d.delivery_id, d.next_attempt_at, ROW_NUMBER() OVER (
              PARTITION BY d.tenant ORDER BY d.next_attempt_at, d.delivery_id) AS turn,
            coalesce((SELECT value FROM json_each(:rooms) WHERE key = d.tenant),
                     :per_tenant) AS room
       FROM tenants JOIN webhook_deliveries d ON d.delivery_id IN (
              SELECT delivery_id FROM webhook_deliveries
               WHERE tenant = tenants.t AND state = 'pending' AND next_attempt_at <= :now
                 AND (lease_expires IS NULL OR lease_expires <= :now)
               ORDER BY tenant, next_attempt_at, delivery_id LIMIT :limit))
    WHERE turn <= room
    ORDER BY turn, next_attempt_at, delivery_id LIMIT :limit)
RETURNING *;

-- An attempt's outcome, written only while its lease holds.
-- name: settle_delivery
UPDATE webhook_deliveries SET state = :state, lease_owner = NULL, lease_expires = NULL,
       next_attempt_at = CASE WHEN :state = 'pending' THEN :next_at ELSE next_attempt_at END,
       last_status = :status, last_error = :error,
       delivered_at = CASE WHEN :state = 'delivered' THEN :now END, updated_at = :now
 WHERE delivery_id = :delivery_id AND attempts = :attempts AND lease_owner = :owner
   AND state = 'pending';

-- name: list_deliveries
SELECT * FROM webhook_deliveries WHERE tenant = :tenant ORDER BY delivery_id DESC LIMIT :limit;

-- name: job_deliveries
SELECT * FROM webhook_deliveries WHERE tenant = :tenant AND job_id = :job_id
 ORDER BY delivery_id;

-- name: delivery_stats
SELECT state, count(*) AS n, min(created_at) AS oldest FROM webhook_deliveries GROUP BY state;

-- Sent again on a tenant's request: due now, one attempt more (its count goes on, so
-- a stale sender's late outcome stays fenced off).
-- name: redeliver
UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = :now, lease_owner = NULL,
       lease_expires = NULL, updated_at = :now
 WHERE delivery_id = :delivery_id AND tenant = :tenant AND state <> 'pending'
RETURNING *;

-- name: get_delivery
SELECT * FROM webhook_deliveries WHERE delivery_id = :delivery_id AND tenant = :tenant;

-- Deliveries that ended (delivered, dead or skipped) before the cutoff, oldest first:
-- retention's (casesignd.engine.retention). A pending one stays until it ends.
-- name: expire_deliveries
DELETE FROM webhook_deliveries WHERE delivery_id IN (
  SELECT delivery_id FROM webhook_deliveries
   WHERE state <> 'pending' AND updated_at < :cutoff
   ORDER BY updated_at LIMIT :limit);

-- Named statements of the PostgreSQL store. Each block starts with "-- name: NAME";
-- parameters are psycopg's %(name)s. Times are passed in (%(now)s): the database's
-- clock read once per transaction, or a test's clock.

-- Migrations run one daemon at a time: under this lock, held until the transaction
-- that applies them commits (the key is fixed; any other casesignd waits for it).
-- name: migration_lock
SELECT pg_advisory_xact_lock(hashtextextended('casesignd:migrate', 0));

-- One live daemon per node name: this lock, held by a connection of its own for the
-- daemon's life (the server frees it when that session ends, however it ends). A
-- node's start-up then takes back every lease of its name at once.
-- name: node_lock
SELECT pg_try_advisory_lock(hashtextextended('casesignd:node:' || %(node)s::text, 0)) AS taken;

-- Jobs were queued: the daemons that LISTEN claim at once ([store] notify).
-- name: notify
SELECT pg_notify(%(channel)s, '') AS sent;

-- A signature key locked across the daemons while a job of it signs (see
-- casesignd/store/postgres_keys.py): a session lock on a connection of its own,
-- freed by the server when that session ends.
-- name: signature_key_lock
SELECT pg_try_advisory_lock(
  hashtextextended('casesignd:sig:' || %(tenant)s::text || ':' || %(sig_key)s::text, 0)) AS taken;

-- name: signature_key_unlock
SELECT pg_advisory_unlock(
  hashtextextended('casesignd:sig:' || %(tenant)s::text || ':' || %(sig_key)s::text, 0)) AS unlocked;

-- An idempotency key locked across the daemons by a kiosk request until its job is
-- written (the same connection). admit_job takes the same lock, shared, for its
-- transaction: a kiosk request and an admission of one key meet as "in progress",
-- two admissions do not (they meet at the key's UNIQUE constraint).
-- name: idem_key_lock
SELECT pg_try_advisory_lock(hashtext('casesignd:idem:' || %(tenant)s::text),
                            hashtext(%(idem_key)s::text)) AS taken;

-- name: idem_key_unlock
SELECT pg_advisory_unlock(hashtext('casesignd:idem:' || %(tenant)s::text),
                          hashtext(%(idem_key)s::text)) AS unlocked;

-- Whether a kiosk request on some daemon has locked an idempotency key (an admission
-- that inserted nothing, with no row of its key: locked, or else the queue is full).
-- name: idem_key_locked
SELECT NOT pg_try_advisory_xact_lock_shared(hashtext('casesignd:idem:' || %(tenant)s::text),
                                            hashtext(%(idem_key)s::text)) AS locked;

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS schema_version (
  version     integer PRIMARY KEY,
  applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_version;

-- name: record_version
INSERT INTO schema_version (version) VALUES (%(version)s);

-- Every connection of the store plans its statements by their indexes, whatever the
-- statistics say: a queue is small when the table is analyzed and deep an hour later
-- (or just created and never analyzed), and a claim planned for a small queue reads
-- every queued row with a bitmap scan and sorts them, on every claim; a gauge read
-- four times a second would scan every job ever kept. Every statement here has an
-- index that leads to its rows in order (the claim's jobs_queued, the sweeps'
-- jobs_running and jobs_retry, the keys, a tenant's jobs). So one plan serves every
-- execution of a statement (psycopg prepares it from its fifth): planning a claim
-- anew each time would cost three times its execution.
-- name: session
SET enable_bitmapscan = off;
SET enable_seqscan = off;
SET plan_cache_mode = force_generic_plan;

-- name: now
SELECT extract(epoch FROM now())::float8 AS now;

-- name: find_idem
SELECT * FROM jobs WHERE tenant = %(tenant)s AND idem_key = %(idem_key)s;

-- An admission is one statement: the row goes in if the queue has room (the committed
-- count and what this transaction changed so far, %(waiting_pending)s) and no kiosk
-- request holds its key (idem_key_lock; this transaction then holds it, shared), and a
-- key already taken (committed, or being inserted by another daemon, which this waits
-- for) inserts nothing. The caller tells "taken" from "held" and "full" by looking the
-- key up.
-- name: admit_job
INSERT INTO jobs (job_id, tenant, kind, case_id, idem_key, fingerprint, input, input_digest,
                  version, declared_bytes, state, created_at, admitted_at, admission_ms,
                  queued_since, next_attempt_at, correlation_id, updated_at, sig_key,
                  traceparent, priority, not_before)
SELECT %(job_id)s, %(tenant)s, %(kind)s, %(case_id)s::text, %(idem_key)s, %(fingerprint)s,
       %(input)s, %(input_digest)s, %(version)s, %(declared_bytes)s::bigint, 'queued',
       %(created_at)s::float8, %(now)s::float8, %(admission_ms)s::float8,
       greatest(%(now)s::float8, %(not_before)s::float8),
       greatest(%(now)s::float8, %(not_before)s::float8), %(correlation_id)s,
       %(now)s::float8, %(sig_key)s::text, %(traceparent)s::text, %(priority)s::int,
       %(not_before)s::float8
 WHERE (SELECT sum(n) FROM job_counts WHERE state IN ('queued', 'retry_wait'))
       + %(waiting_pending)s < %(max_queue_depth)s
   AND coalesce(pg_try_advisory_xact_lock_shared(hashtext('casesignd:idem:' || %(tenant)s::text),
                                                 hashtext(%(idem_key)s::text)), true)
ON CONFLICT DO NOTHING
RETURNING *;

-- A kiosk flight's job (its key is held in front of the store, so no lookup first).
-- name: insert_job
INSERT INTO jobs (job_id, tenant, kind, case_id, idem_key, fingerprint, input, input_digest,
                  version, declared_bytes, state, created_at, admitted_at, admission_ms,
                  queued_since, next_attempt_at, correlation_id, updated_at, sig_key,
                  traceparent, priority, not_before)
VALUES (%(job_id)s, %(tenant)s, %(kind)s, %(case_id)s, %(idem_key)s, %(fingerprint)s,
        %(input)s, %(input_digest)s, %(version)s, %(declared_bytes)s, 'queued',
        %(created_at)s, %(now)s, %(admission_ms)s,
        greatest(%(now)s::float8, %(not_before)s::float8),
        greatest(%(now)s::float8, %(not_before)s::float8), %(correlation_id)s,
        %(now)s, %(sig_key)s, %(traceparent)s, %(priority)s::int, %(not_before)s::float8)
ON CONFLICT DO NOTHING
RETURNING *;

-- A kiosk request that signed, written when done: the row that insert_job, claim_job
-- and finish leave, in one statement (the flight's clocks; %(now)s is the finish).
-- name: insert_flight_succeeded
INSERT INTO jobs (job_id, tenant, kind, case_id, idem_key, fingerprint, input, input_digest,
                  version, declared_bytes, state, attempt, created_at, admitted_at,
                  admission_ms, claimed_at, first_claimed_at, finished_at, next_attempt_at,
                  queue_wait_ms, processing_ms, result, correlation_id, updated_at, sig_key,
                  traceparent)
VALUES (%(job_id)s, %(tenant)s, %(kind)s, %(case_id)s, %(idem_key)s, %(fingerprint)s,
        %(input)s, %(input_digest)s, %(version)s, %(declared_bytes)s, 'succeeded', 1,
        %(created_at)s, %(admitted_at)s, %(admission_ms)s, %(claimed_at)s, %(claimed_at)s,
        %(now)s, %(admitted_at)s,
        greatest(0, (%(claimed_at)s::float8 - %(admitted_at)s::float8) * 1000.0),
        greatest(0, (%(now)s::float8 - %(claimed_at)s::float8) * 1000.0),
        %(result)s, %(correlation_id)s, %(now)s, %(sig_key)s, %(traceparent)s)
ON CONFLICT DO NOTHING
RETURNING *;

-- The kiosk path takes a job it just admitted (or finds queued) without queueing it.
-- name: claim_job
UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_owner = %(owner)s,
       lease_expires = %(now)s::float8 + %(lease_s)s::float8, claimed_at = %(now)s::float8,
       first_claimed_at = coalesce(first_claimed_at, %(now)s::float8),
       queue_wait_ms = queue_wait_ms
         + greatest(0, (%(now)s::float8 - coalesce(queued_since, %(now)s::float8)) * 1000.0),
       queued_since = NULL, updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND state = 'queued'
RETURNING *;

-- Every lease in one statement; the ones it does not return are no longer held.
-- name: renew
UPDATE jobs SET lease_expires = %(now)s::float8 + %(lease_s)s::float8, updated_at = %(now)s::float8
  FROM unnest(%(job_ids)s::text[], %(attempts)s::integer[], %(owners)s::text[])
       AS lease (job_id, attempt, owner)
 WHERE jobs.job_id = lease.job_id AND jobs.attempt = lease.attempt
   AND jobs.lease_owner = lease.owner AND jobs.state = 'running'
RETURNING jobs.job_id, jobs.attempt;

-- name: finish
UPDATE jobs SET state = 'succeeded', result = %(result)s, finished_at = %(now)s::float8,
       processing_ms = processing_ms + greatest(0, (%(now)s::float8 - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(owner)s
   AND state = 'running'
RETURNING *;

-- A finish whose signature was recorded before names the recorded one.
-- name: set_result
UPDATE jobs SET result = %(result)s WHERE job_id = %(job_id)s RETURNING *;

-- name: retry_later
UPDATE jobs SET state = 'retry_wait', next_attempt_at = %(next_at)s::float8,
       failures = failures + %(count)s, error_code = %(code)s, error_category = NULL,
       processing_ms = processing_ms + greatest(0, (%(now)s::float8 - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(owner)s
   AND state = 'running'
RETURNING *;

-- name: fail
UPDATE jobs SET state = 'failed', failures = failures + 1, error_category = %(category)s,
       error_code = %(code)s, result = %(result)s, finished_at = %(now)s::float8,
       processing_ms = processing_ms + greatest(0, (%(now)s::float8 - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(owner)s
   AND state = 'running'
RETURNING *;

-- name: release
UPDATE jobs SET state = 'queued', next_attempt_at = %(now)s::float8, queued_since = %(now)s::float8,
       processing_ms = processing_ms + greatest(0, (%(now)s::float8 - claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND attempt = %(attempt)s AND lease_owner = %(owner)s
   AND state = 'running'
RETURNING *;

-- Any daemon may run this: one statement takes the running jobs whose lease expired
-- (or, at start-up, every running job) and that no transaction holds (a conclude under
-- way wins, or is refused by its fence), and requeues them, or fails as lost those
-- that lost %(max_lost)s leases.
-- name: reclaim
WITH expired AS (
  SELECT job_id, lease_owner, lease_expires, lost_leases + 1 >= %(max_lost)s AS lost_out
    FROM jobs
   WHERE state = 'running'
     AND (lease_expires < %(now)s::float8
          OR starts_with(lease_owner, %(node_prefix)s::text))
   ORDER BY lease_expires, job_id
   LIMIT %(cap)s
   FOR UPDATE SKIP LOCKED
)
UPDATE jobs SET
       state = CASE WHEN expired.lost_out THEN 'failed' ELSE 'queued' END,
       lost_leases = jobs.lost_leases + 1,
       error_category = CASE WHEN expired.lost_out THEN 'lost' ELSE jobs.error_category END,
       error_code = CASE WHEN expired.lost_out THEN 'lease_lost' ELSE jobs.error_code END,
       finished_at = CASE WHEN expired.lost_out THEN %(now)s::float8 ELSE jobs.finished_at END,
       next_attempt_at = CASE WHEN expired.lost_out THEN jobs.next_attempt_at
                              ELSE %(now)s::float8 END,
       queued_since = CASE WHEN expired.lost_out THEN jobs.queued_since ELSE %(now)s::float8 END,
       processing_ms = jobs.processing_ms
         + greatest(0, (%(now)s::float8 - jobs.claimed_at) * 1000.0),
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
  FROM expired
 WHERE jobs.job_id = expired.job_id
RETURNING jobs.*, expired.lease_owner AS old_owner, expired.lease_expires AS old_expires,
          expired.lost_out;

-- retry_wait -> queued for jobs whose backoff has passed, in one statement.
-- name: promote_due
WITH due AS (
  SELECT job_id FROM jobs
   WHERE state = 'retry_wait' AND next_attempt_at <= %(now)s::float8
   ORDER BY next_attempt_at
   LIMIT %(cap)s
   FOR UPDATE SKIP LOCKED
)
UPDATE jobs SET state = 'queued', queued_since = %(now)s::float8, updated_at = %(now)s::float8
  FROM due
 WHERE jobs.job_id = due.job_id
RETURNING jobs.*;

-- name: cancel
WITH waiting AS (
  SELECT job_id, state FROM jobs
   WHERE job_id = %(job_id)s AND tenant = %(tenant)s AND state IN ('queued', 'retry_wait')
   FOR UPDATE
)
UPDATE jobs SET state = 'canceled', finished_at = %(now)s::float8, updated_at = %(now)s::float8,
       queue_wait_ms = jobs.queue_wait_ms
         + greatest(0, (%(now)s::float8 - coalesce(jobs.queued_since, %(now)s::float8)) * 1000.0),
       queued_since = NULL
  FROM waiting
 WHERE jobs.job_id = waiting.job_id
RETURNING jobs.*, waiting.state AS old_state;

-- name: replay
UPDATE jobs SET state = 'queued', series = series + 1, failures = 0, lost_leases = 0,
       error_category = NULL, error_code = NULL, result = NULL, finished_at = NULL,
       next_attempt_at = %(now)s::float8, queued_since = %(now)s::float8,
       updated_at = %(now)s::float8
 WHERE job_id = %(job_id)s AND tenant = %(tenant)s AND state = 'failed'
   AND (SELECT sum(n) FROM job_counts WHERE state IN ('queued', 'retry_wait'))
       + %(waiting_pending)s < %(max_queue_depth)s
RETURNING *;

-- name: get_job
SELECT * FROM jobs WHERE job_id = %(job_id)s AND tenant = %(tenant)s;

-- name: get_job_any
SELECT * FROM jobs WHERE job_id = %(job_id)s;

-- name: list_jobs
SELECT * FROM jobs WHERE tenant = %(tenant)s AND job_id < %(cursor)s
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY job_id DESC LIMIT %(limit)s;

-- name: list_jobs_state
SELECT * FROM jobs WHERE tenant = %(tenant)s AND state = ANY(%(states)s::text[])
   AND job_id < %(cursor)s AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY job_id DESC LIMIT %(limit)s;

-- A case has few jobs: found by its index (jobs_case), then sorted.
-- name: list_jobs_case
SELECT * FROM jobs WHERE tenant = %(tenant)s AND case_id = %(case_id)s::text
   AND job_id < %(cursor)s
   AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY job_id DESC LIMIT %(limit)s;

-- The console's summary (GET /v1/stats): a tenant's jobs that wait, run or failed,
-- counted by index (jobs_tenant_state), with the oldest wait.
-- name: tenant_live
SELECT state, count(*) AS n, min(queued_since) AS oldest FROM jobs
 WHERE tenant = %(tenant)s AND state IN ('queued', 'retry_wait', 'running', 'failed')
 GROUP BY state;

-- ... and the clocks of its jobs that ended since since, per bucket and state
-- (jobs_finished: only the window's rows are read).
-- name: tenant_ended
SELECT floor((finished_at - %(since)s::float8) / %(bucket_s)s::float8)::int AS bucket,
       state, count(*) AS n,
       avg(admission_ms) AS admission_mean, max(admission_ms) AS admission_max,
       avg(queue_wait_ms) AS queue_wait_mean, max(queue_wait_ms) AS queue_wait_max,
       avg(processing_ms) AS processing_mean, max(processing_ms) AS processing_max,
       avg((finished_at - created_at) * 1000.0) AS total_mean,
       max((finished_at - created_at) * 1000.0) AS total_max
  FROM jobs
 WHERE finished_at >= %(since)s::float8 AND state IN ('succeeded', 'failed', 'canceled')
   AND tenant = %(tenant)s
 GROUP BY 1, state;

-- The audit chain's last events (GET /v1/audit/head), newest first.
-- name: chain_tail
SELECT * FROM events ORDER BY seq DESC LIMIT %(limit)s;

-- The events of a tenant's newest jobs, each found by its job (events_job).
-- name: tenant_recent_events
SELECT * FROM events
 WHERE job_id IN (SELECT job_id FROM jobs WHERE tenant = %(tenant)s
                   ORDER BY job_id DESC LIMIT %(jobs)s)
   AND tenant = %(tenant)s
 ORDER BY seq;

-- name: event_hashes
SELECT seq, hash FROM events WHERE seq = ANY(%(seqs)s::bigint[]);

-- The chain head, locked until this transaction commits: taken once per transaction,
-- after every other statement of it.
-- name: lock_chain_head
SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE;

-- A transaction's events, chained after the head it locked, and the new head. The
-- events come as one JSON array (one parameter, decoded by the server) rather than an
-- array per column.
-- name: append_events
WITH appended AS (
  INSERT INTO events (seq, event_id, job_id, tenant, case_id, type, actor, at, attempt,
                      input_digest, policy_version, detail, prev_hash, hash)
  SELECT seq, event_id, job_id, tenant, case_id, type, actor, at, attempt,
         input_digest, policy_version, detail, prev_hash, hash
    FROM json_populate_recordset(NULL::events, %(events)s::json)
)
UPDATE audit_head SET seq = %(head_seq)s, hash = %(head_hash)s WHERE id = 1;

-- A transaction's changes to the jobs per state, after the head's lock.
-- name: count_states
UPDATE job_counts SET n = job_counts.n + d.n
  FROM unnest(%(states)s::text[], %(deltas)s::bigint[]) AS d (state, n)
 WHERE job_counts.state = d.state;

-- name: job_events
SELECT * FROM events WHERE job_id = %(job_id)s AND tenant = %(tenant)s ORDER BY seq;

-- name: all_events
SELECT * FROM events ORDER BY seq;

-- name: state_counts
SELECT state, n FROM job_counts WHERE n > 0;

-- name: oldest_queued
SELECT min(queued_since) AS oldest, extract(epoch FROM clock_timestamp())::float8 AS now
  FROM jobs WHERE state = 'queued';

-- One read for a kiosk request: the job its idempotency key names, if any, and the
-- signature recorded for its signature key, if any.
-- name: kiosk_lookup
SELECT (SELECT job_id FROM jobs WHERE tenant = %(tenant)s AND idem_key = %(idem_key)s) AS job_id,
       s.artifact_id, s.sha256, s.size
  FROM (SELECT 1) AS one
  LEFT JOIN signatures AS s ON s.tenant = %(tenant)s AND s.sig_key = %(sig_key)s;

-- name: get_signature
SELECT * FROM signatures WHERE tenant = %(tenant)s AND sig_key = %(sig_key)s;

-- Put-once across every daemon: a key another transaction is recording waits for it,
-- then inserts nothing, and the caller reads the record that stands.
-- name: put_signature
INSERT INTO signatures (tenant, sig_key, artifact_id, sha256, size, job_id, created_at)
VALUES (%(tenant)s, %(sig_key)s, %(artifact_id)s, %(sha256)s, %(size)s, %(job_id)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: put_artifact
INSERT INTO artifacts (artifact_id, tenant, case_id, job_id, sha256, size, media_type,
                       created_at, timestamp_expires_at)
VALUES (%(artifact_id)s, %(tenant)s, %(case_id)s, %(job_id)s, %(sha256)s, %(size)s,
        %(media_type)s, %(now)s, %(timestamp_expires_at)s)
ON CONFLICT DO NOTHING;

-- name: mark_renewed
UPDATE artifacts SET renewed_by = %(renewed_by)s
 WHERE artifact_id = %(artifact_id)s AND tenant = %(tenant)s AND renewed_by IS NULL;

-- name: due_renewals
SELECT artifact_id, tenant, timestamp_expires_at FROM artifacts
 WHERE timestamp_expires_at IS NOT NULL AND renewed_by IS NULL
   AND timestamp_expires_at <= %(before)s::float8
 ORDER BY timestamp_expires_at LIMIT %(limit)s;

-- name: get_artifact
SELECT * FROM artifacts WHERE artifact_id = %(artifact_id)s;

-- name: put_artifact_data
INSERT INTO artifact_data (artifact_id, data, key_id, wrapped_key)
VALUES (%(artifact_id)s, %(data)s, %(key_id)s, %(wrapped_key)s)
ON CONFLICT DO NOTHING;

-- name: get_artifact_data
SELECT data, key_id, wrapped_key FROM artifact_data WHERE artifact_id = %(artifact_id)s;

-- name: writable
SELECT pg_is_in_recovery() AS in_recovery;

-- The webhook outbox (casesignd.store.outbox).
-- name: insert_delivery
INSERT INTO webhook_deliveries (delivery_id, tenant, job_id, event, endpoint, created_at,
                                next_attempt_at, updated_at)
VALUES (%(delivery_id)s, %(tenant)s, %(job_id)s, %(event)s, %(endpoint)s, %(now)s, %(now)s,
        %(now)s);

-- A lease on due deliveries, like a claim: the attempt number bumps, and a row another
-- daemon is taking is skipped, so one daemon sends a delivery at a time. Tenants take
-- turns (each one's oldest, then each one's second...), so a tenant whose receiver is
-- slow or down and whose deliveries pile up never holds another's back. The tenants
-- with pending deliveries are found by skipping through the (tenant, next_attempt_at,
-- delivery_id) index and each one's oldest due ones read from it, so the cost grows
-- with the tenants, not with their backlogs; the candidates, in turn order, are then
-- locked by key, their due condition checked again once locked. A tenant takes at
-- most its room: rooms (a JSON object, tenant to room) or else per_tenant, so that
-- one whose receiver hangs holds only so many of the sender's places.
-- name: take_deliveries
WITH RECURSIVE tenants(t) AS (
  (SELECT tenant FROM webhook_deliveries WHERE state = 'pending'
    ORDER BY tenant, next_attempt_at, delivery_id LIMIT 1)
  UNION ALL
  SELECT (SELECT tenant FROM webhook_deliveries WHERE state = 'pending' AND tenant > t
           ORDER BY tenant, next_attempt_at, delivery_id LIMIT 1)
    FROM tenants WHERE t IS NOT NULL),
candidates AS (
  SELECT ARRAY(
    SELECT c.delivery_id FROM tenants CROSS JOIN LATERAL (
      SELECT delivery_id, next_attempt_at,
             row_number() OVER (ORDER BY next_attempt_at, delivery_id) AS turn
        FROM (SELECT delivery_id, next_attempt_at FROM webhook_deliveries
               WHERE tenant = tenants.t AND state = 'pending'
                 AND next_attempt_at <= %(now)s::float8
                 AND (lease_expires IS NULL OR lease_expires <= %(now)s::float8)
               ORDER BY tenant, next_attempt_at, delivery_id LIMIT %(limit)s) own) c
     WHERE c.turn <= coalesce((%(rooms)s::jsonb ->> tenants.t)::bigint,
                              %(per_tenant)s::bigint)
     ORDER BY c.turn, c.next_attempt_at, c.delivery_id) AS ids)
UPDATE webhook_deliveries SET attempts = attempts + 1, lease_owner = %(owner)s,
       lease_expires = %(now)s::float8 + %(lease_s)s::float8, updated_at = %(now)s::float8
 WHERE delivery_id IN (
   SELECT w.delivery_id FROM webhook_deliveries w, candidates
    WHERE w.delivery_id = ANY (candidates.ids) AND w.state = 'pending'
      AND w.next_attempt_at <= %(now)s::float8
      AND (w.lease_expires IS NULL OR w.lease_expires <= %(now)s::float8)
    ORDER BY array_position(candidates.ids, w.delivery_id) LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED)
RETURNING *;

-- An attempt's outcome, written only while its lease holds.
-- name: settle_delivery
UPDATE webhook_deliveries SET state = %(state)s::text, lease_owner = NULL, lease_expires = NULL,
       next_attempt_at = CASE WHEN %(state)s::text = 'pending' THEN %(next_at)s::float8
                              ELSE next_attempt_at END,
       last_status = %(status)s::integer, last_error = %(error)s::text,
       delivered_at = CASE WHEN %(state)s::text = 'delivered' THEN %(now)s::float8 END,
       updated_at = %(now)s::float8
 WHERE delivery_id = %(delivery_id)s AND attempts = %(attempts)s AND lease_owner = %(owner)s::text
   AND state = 'pending';

-- name: list_deliveries
SELECT * FROM webhook_deliveries WHERE tenant = %(tenant)s
 ORDER BY delivery_id DESC LIMIT %(limit)s;

-- name: job_deliveries
SELECT * FROM webhook_deliveries WHERE tenant = %(tenant)s AND job_id = %(job_id)s
 ORDER BY delivery_id;

-- name: delivery_stats
SELECT state, count(*) AS n, min(created_at) AS oldest FROM webhook_deliveries GROUP BY state;

-- Sent again on a tenant's request: due now, one attempt more (its count goes on, so
-- a stale sender's late outcome stays fenced off).
-- name: redeliver
UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = %(now)s::float8,
       lease_owner = NULL, lease_expires = NULL, updated_at = %(now)s::float8
 WHERE delivery_id = %(delivery_id)s AND tenant = %(tenant)s AND state <> 'pending'
RETURNING *;

-- name: get_delivery
SELECT * FROM webhook_deliveries WHERE delivery_id = %(delivery_id)s AND tenant = %(tenant)s;

-- Deliveries that ended (delivered, dead or skipped) before the cutoff, oldest first:
-- retention's (casesignd.engine.retention). A pending one stays until it ends.
-- name: expire_deliveries
DELETE FROM webhook_deliveries WHERE delivery_id IN (
  SELECT delivery_id FROM webhook_deliveries
   WHERE state <> 'pending' AND updated_at < %(cutoff)s
   ORDER BY updated_at LIMIT %(limit)s);

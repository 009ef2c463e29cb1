-- casesignd schema on PostgreSQL, version 1: the SQLite store's schema (sql/0001 to
-- sql/0006) in one step, for any number of daemons sharing the database. Times are
-- Unix seconds (double precision, UTC), as in SQLite, so a row reads the same from
-- either store; lease times are the database's clock, one for every daemon.

CREATE TABLE jobs (
  -- Byte order ("C"): ids sort by time whatever the database's locale, and a page's
  -- cursor compares as in SQLite.
  job_id           text COLLATE "C" PRIMARY KEY,
  tenant           text NOT NULL,
  kind             text NOT NULL,
  case_id          text,
  idem_key         text NOT NULL,          -- "key:<client key>" or "derived:<sha256>"
  fingerprint      text NOT NULL,          -- SHA-256 of the normalized request
  input            text NOT NULL,          -- normalized input, canonical JSON
  input_digest     text NOT NULL,          -- SHA-256 of input
  version          text NOT NULL,          -- policy or template version used
  declared_bytes   bigint NOT NULL DEFAULT 0,
  state            text NOT NULL CHECK (state IN
                     ('queued', 'running', 'retry_wait', 'succeeded', 'failed', 'canceled')),
  attempt          integer NOT NULL DEFAULT 0,  -- monotonic over the job's life: the fence
  series           integer NOT NULL DEFAULT 1,  -- incremented by a dead-letter replay
  failures         integer NOT NULL DEFAULT 0,  -- failed attempts in this series
  lost_leases      integer NOT NULL DEFAULT 0,  -- expired leases in this series
  lease_owner      text,                        -- opaque: a daemon's name may lead it
  lease_expires    double precision,
  created_at       double precision NOT NULL,
  admitted_at      double precision NOT NULL,
  admission_ms     double precision NOT NULL DEFAULT 0,
  queued_since     double precision,
  claimed_at       double precision,
  first_claimed_at double precision,
  finished_at      double precision,
  next_attempt_at  double precision NOT NULL,
  queue_wait_ms    double precision NOT NULL DEFAULT 0,
  processing_ms    double precision NOT NULL DEFAULT 0,
  result           text,                   -- JSON: artifact_id, sha256, size, media_type, detail
  error_category   text,
  error_code       text,
  correlation_id   text NOT NULL,
  updated_at       double precision NOT NULL,
  sig_key          text,                   -- the signature a sign_case job makes
  -- Idempotency across every daemon: two admissions of one key meet here, not in a
  -- process's memory.
  CONSTRAINT jobs_idem UNIQUE (tenant, idem_key)
);
CREATE INDEX jobs_queued ON jobs (next_attempt_at, job_id) WHERE state = 'queued';
CREATE INDEX jobs_retry ON jobs (next_attempt_at) WHERE state = 'retry_wait';
CREATE INDEX jobs_running ON jobs (lease_expires) WHERE state = 'running';
CREATE INDEX jobs_tenant ON jobs (tenant, job_id);
CREATE INDEX jobs_tenant_state ON jobs (tenant, state, job_id);

-- Jobs per state, so that admission checks the queue depth and the gauges read the
-- states without counting a deep queue. The writer adds each transaction's changes
-- in its last statements, after it locked the chain's head (casesignd.store.
-- postgres_writer), so these rows are locked only while the head is: they add no
-- wait between daemons, and cost one statement per transaction rather than a
-- trigger per changed row.
CREATE TABLE job_counts (
  state  text PRIMARY KEY,
  n      bigint NOT NULL DEFAULT 0
);
INSERT INTO job_counts (state)
SELECT unnest(ARRAY['queued', 'running', 'retry_wait', 'succeeded', 'failed', 'canceled']);

-- The audit log: one global hash chain, append-only.
CREATE TABLE events (
  seq             bigint PRIMARY KEY,
  event_id        text NOT NULL UNIQUE,
  job_id          text NOT NULL,
  tenant          text NOT NULL,
  case_id         text,
  type            text NOT NULL,
  actor           text NOT NULL,
  at              text NOT NULL,
  attempt         integer NOT NULL,
  input_digest    text,
  policy_version  text,
  detail          text NOT NULL,          -- canonical JSON text: what the hash covers
  prev_hash       text NOT NULL,
  hash            text NOT NULL
);
CREATE INDEX events_job ON events (job_id, seq);

CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the audit log is append-only' USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

-- The chain's head: one fixed row. Every writer locks it (SELECT ... FOR UPDATE) once
-- per transaction, just before it commits, and chains its events after the head it
-- finds; locking "the last event" instead would let two writers chain after the same
-- event and fork the chain.
CREATE TABLE audit_head (
  id    integer PRIMARY KEY CHECK (id = 1),
  seq   bigint NOT NULL,
  hash  text NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, repeat('0', 64));

-- One signature per signature key (case, document digests, signers, policy), put-once
-- across every daemon by the primary key.
CREATE TABLE signatures (
  tenant          text NOT NULL,
  sig_key         text NOT NULL,
  artifact_id     text NOT NULL,
  sha256          text NOT NULL,
  size            bigint NOT NULL,
  job_id          text NOT NULL,
  created_at      double precision NOT NULL,
  PRIMARY KEY (tenant, sig_key)
);

-- A B-LTA artifact's last document timestamp proves what it covers while that
-- timestamp's chain is valid: when the chain expires, and the artifact that renewed it.
CREATE TABLE artifacts (
  artifact_id          text PRIMARY KEY,
  tenant               text NOT NULL,
  job_id               text NOT NULL,
  sha256               text NOT NULL,
  size                 bigint NOT NULL,
  media_type           text NOT NULL,
  created_at           double precision NOT NULL,
  timestamp_expires_at double precision,
  renewed_by           text
);
CREATE INDEX artifacts_renewal ON artifacts (timestamp_expires_at)
    WHERE timestamp_expires_at IS NOT NULL AND renewed_by IS NULL;

-- Small signed results of the kiosk path, committed with their job's record.
CREATE TABLE artifact_data (
  artifact_id     text PRIMARY KEY,
  data            bytea NOT NULL
);

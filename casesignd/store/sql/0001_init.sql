-- casesignd schema, version 1. Times are Unix seconds (REAL, UTC).

CREATE TABLE jobs (
  job_id          TEXT PRIMARY KEY,
  tenant          TEXT NOT NULL,
  kind            TEXT NOT NULL,
  case_id         TEXT,
  idem_key        TEXT NOT NULL,          -- "key:<client key>" or "derived:<sha256>"
  fingerprint     TEXT NOT NULL,          -- SHA-256 of the normalized request
  input           TEXT NOT NULL,          -- normalized input, canonical JSON
  input_digest    TEXT NOT NULL,          -- SHA-256 of input
  version         TEXT NOT NULL,          -- policy or template version used
  declared_bytes  INTEGER NOT NULL DEFAULT 0,
  state           TEXT NOT NULL CHECK (state IN
                    ('queued', 'running', 'retry_wait', 'succeeded', 'failed', 'canceled')),
  attempt         INTEGER NOT NULL DEFAULT 0,  -- monotonic over the job's life: the fence
  series          INTEGER NOT NULL DEFAULT 1,  -- incremented by a dead-letter replay
  failures        INTEGER NOT NULL DEFAULT 0,  -- failed attempts in this series
  lost_leases     INTEGER NOT NULL DEFAULT 0,  -- expired leases in this series
  lease_owner     TEXT,
  lease_expires   REAL,
  created_at      REAL NOT NULL,
  admitted_at     REAL NOT NULL,
  admission_ms    REAL NOT NULL DEFAULT 0,
  queued_since    REAL,
  claimed_at      REAL,
  first_claimed_at REAL,
  finished_at     REAL,
  next_attempt_at REAL NOT NULL,
  queue_wait_ms   REAL NOT NULL DEFAULT 0,
  processing_ms   REAL NOT NULL DEFAULT 0,
  result          TEXT,                   -- JSON: artifact_id, sha256, size, media_type, detail
  error_category  TEXT,
  error_code      TEXT,
  correlation_id  TEXT NOT NULL,
  updated_at      REAL NOT NULL
);
CREATE UNIQUE INDEX jobs_idem ON jobs (tenant, idem_key);
CREATE INDEX jobs_queued ON jobs (next_attempt_at, job_id) WHERE state = 'queued';
CREATE INDEX jobs_retry ON jobs (next_attempt_at) WHERE state = 'retry_wait';
CREATE INDEX jobs_running ON jobs (lease_expires) WHERE state = 'running';
CREATE INDEX jobs_tenant ON jobs (tenant, job_id);
CREATE INDEX jobs_tenant_state ON jobs (tenant, state, job_id);

-- The audit log: one global hash chain, append-only.
CREATE TABLE events (
  seq             INTEGER PRIMARY KEY,
  event_id        TEXT NOT NULL UNIQUE,
  job_id          TEXT NOT NULL,
  tenant          TEXT NOT NULL,
  case_id         TEXT,
  type            TEXT NOT NULL,
  actor           TEXT NOT NULL,
  at              TEXT NOT NULL,
  attempt         INTEGER NOT NULL,
  input_digest    TEXT,
  policy_version  TEXT,
  detail          TEXT NOT NULL,          -- canonical JSON object
  prev_hash       TEXT NOT NULL,
  hash            TEXT NOT NULL
);
CREATE INDEX events_job ON events (job_id, seq);

CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;

-- One signature per signature key (case, document digests, signers, policy), put-once.
CREATE TABLE signatures (
  tenant          TEXT NOT NULL,
  sig_key         TEXT NOT NULL,
  artifact_id     TEXT NOT NULL,
  sha256          TEXT NOT NULL,
  size            INTEGER NOT NULL,
  job_id          TEXT NOT NULL,
  created_at      REAL NOT NULL,
  PRIMARY KEY (tenant, sig_key)
);

CREATE TABLE artifacts (
  artifact_id     TEXT PRIMARY KEY,
  tenant          TEXT NOT NULL,
  job_id          TEXT NOT NULL,
  sha256          TEXT NOT NULL,
  size            INTEGER NOT NULL,
  media_type      TEXT NOT NULL,
  created_at      REAL NOT NULL
);

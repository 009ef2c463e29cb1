-- Many tenants on one queue (casesignd.store.claims): claims paused by an operator,
-- and a job's priority and schedule, which order and time its claim.

-- Claims paused of a kind, of a tenant, or of both; '' stands for "every": a row
-- ('', 'acme') pauses every kind of acme, ('sign_case', '') sign_case of every
-- tenant. Admission goes on; only claims skip them.
CREATE TABLE pauses (
  tenant          TEXT NOT NULL,
  kind            TEXT NOT NULL,
  since           REAL NOT NULL,
  actor           TEXT NOT NULL,
  PRIMARY KEY (tenant, kind)
);

-- 0..9, 0 first (Oban's order): it orders a tenant's own jobs only.
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- When the job asked to run no earlier than (its next_attempt_at starts there).
ALTER TABLE jobs ADD COLUMN not_before REAL;

-- A claim takes turns among the tenants, and within one the first of its own order:
-- this index leads to both (each tenant's queue, in its order).
CREATE INDEX jobs_fair ON jobs (tenant, priority, next_attempt_at, job_id) WHERE state = 'queued';

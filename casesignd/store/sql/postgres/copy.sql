-- Named statements of store copy's one transaction into an empty PostgreSQL store.

-- A daemon already on the target waits (its writes) until the copy commits, then
-- chains after it; one that holds a table longer than 10 s makes the copy give up.
-- The transaction itself may run for as long as the rows and files take: a
-- statement of it (a COPY of millions of events) or a pause while files are copied
-- is no fault.
-- name: settings
SET LOCAL lock_timeout = '10s';
SET LOCAL statement_timeout = 0;
SET LOCAL idle_in_transaction_session_timeout = 0;

-- EXCLUSIVE: writers wait, readers (a daemon's GET) read on.
-- name: lock_tables
LOCK TABLE jobs, events, signatures, artifacts, artifact_data, holds, objects, pauses,
  tenant_usage, job_counts, audit_head, data_keys
  IN EXCLUSIVE MODE;

-- The chain's head: the last event copied, so the next event chains on.
-- name: set_head
UPDATE audit_head SET seq = %(seq)s, hash = %(hash)s WHERE id = 1;

-- The jobs per state, counted from the copied jobs (SQLite's counters are its own).
-- name: recount_states
UPDATE job_counts SET n = (SELECT count(*) FROM jobs WHERE jobs.state = job_counts.state);

-- The number of jobs waiting (queued or retry_wait), kept by triggers in the same
-- transaction as every change, so that admission checks the queue depth in O(1)
-- instead of counting a deep queue on every request.

CREATE TABLE counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO counters (name, value)
SELECT 'waiting', count(*) FROM jobs WHERE state IN ('queued', 'retry_wait');

CREATE TRIGGER jobs_waiting_insert AFTER INSERT ON jobs
WHEN NEW.state IN ('queued', 'retry_wait')
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'waiting'; END;

CREATE TRIGGER jobs_waiting_update AFTER UPDATE OF state ON jobs
WHEN (OLD.state IN ('queued', 'retry_wait')) != (NEW.state IN ('queued', 'retry_wait'))
BEGIN
  UPDATE counters
     SET value = value + (CASE WHEN NEW.state IN ('queued', 'retry_wait') THEN 1 ELSE -1 END)
   WHERE name = 'waiting';
END;

CREATE TRIGGER jobs_waiting_delete AFTER DELETE ON jobs
WHEN OLD.state IN ('queued', 'retry_wait')
BEGIN UPDATE counters SET value = value - 1 WHERE name = 'waiting'; END;

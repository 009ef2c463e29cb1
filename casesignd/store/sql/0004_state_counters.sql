-- Jobs per state, kept by triggers in the same transaction as every change. The
-- state gauges are read four times a second; counting a store that keeps every job
-- ever admitted would cost more with every job.

INSERT INTO counters (name, value)
SELECT 'state:' || s.state, (SELECT count(*) FROM jobs WHERE jobs.state = s.state)
  FROM (SELECT 'queued' AS state UNION ALL SELECT 'running' UNION ALL SELECT 'retry_wait'
        UNION ALL SELECT 'succeeded' UNION ALL SELECT 'failed' UNION ALL SELECT 'canceled') AS s;

CREATE TRIGGER jobs_state_insert AFTER INSERT ON jobs
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'state:' || NEW.state; END;

CREATE TRIGGER jobs_state_update AFTER UPDATE OF state ON jobs
WHEN OLD.state != NEW.state
BEGIN
  UPDATE counters SET value = value - 1 WHERE name = 'state:' || OLD.state;
  UPDATE counters SET value = value + 1 WHERE name = 'state:' || NEW.state;
END;

CREATE TRIGGER jobs_state_delete AFTER DELETE ON jobs
BEGIN UPDATE counters SET value = value - 1 WHERE name = 'state:' || OLD.state; END;

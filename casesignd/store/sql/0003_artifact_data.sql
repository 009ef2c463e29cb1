-- Small signed results of the kiosk path, kept in the store itself: written in the
-- same commit as their job's record, so a result is durable exactly when its record
-- is, with no file and no fsync of its own. Larger results are files (artifacts/).

CREATE TABLE artifact_data (
  artifact_id     TEXT PRIMARY KEY,
  data            BLOB NOT NULL
);

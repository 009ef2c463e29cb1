-- Data lifecycle ([retention], legal holds, erasure): what lives how long.

-- A case under a legal hold keeps everything until the hold is lifted.
CREATE TABLE holds (
  tenant          TEXT NOT NULL,
  case_id         TEXT NOT NULL,
  placed_at       REAL NOT NULL,
  PRIMARY KEY (tenant, case_id)
);

-- The objects uploaded to cases: the files are named by hashes (casesignd.files.objects),
-- so the store keeps what a sweep needs to find the expired ones without a walk.
-- used_at is the later of its last upload to the case and the end of the last job
-- that used it and whose row is gone (while the row is there, the row tells).
CREATE TABLE objects (
  tenant          TEXT NOT NULL,
  case_id         TEXT NOT NULL,
  sha256          TEXT NOT NULL,
  size            INTEGER NOT NULL,
  used_at       REAL NOT NULL,
  PRIMARY KEY (tenant, case_id, sha256)
);
CREATE INDEX objects_used ON objects (used_at);

-- The objects the jobs of this store already name (uploaded before objects had rows).
INSERT OR IGNORE INTO objects (tenant, case_id, sha256, size, used_at)
SELECT j.tenant, j.case_id, lower(json_extract(i.value, '$.sha256')),
       json_extract(i.value, '$.size'), j.created_at
  FROM jobs AS j, json_each(j.input, '$.items') AS i
 WHERE j.kind = 'sign_case' AND j.case_id IS NOT NULL
   AND json_extract(i.value, '$.object_ref') LIKE 'sha256:%';

-- An artifact's case, so that a hold and an erasure find it after its job row is gone.
ALTER TABLE artifacts ADD COLUMN case_id TEXT;
UPDATE artifacts SET case_id = (SELECT j.case_id FROM jobs AS j WHERE j.job_id = artifacts.job_id);
CREATE INDEX artifacts_created ON artifacts (created_at);
CREATE INDEX artifacts_case ON artifacts (tenant, case_id);

-- Terminal jobs by when they ended (jobs_s, rejected_s) and the jobs of a case.
CREATE INDEX jobs_finished ON jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'canceled');
CREATE INDEX jobs_case ON jobs (tenant, case_id);

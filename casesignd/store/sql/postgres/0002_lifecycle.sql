-- Data lifecycle ([retention], legal holds, erasure): what lives how long.

-- A case under a legal hold keeps everything until the hold is lifted.
CREATE TABLE holds (
  tenant          text NOT NULL,
  case_id         text NOT NULL,
  placed_at       double precision NOT NULL,
  PRIMARY KEY (tenant, case_id)
);

-- The objects uploaded to cases: the files are named by hashes (casesignd.files.objects),
-- so the store keeps what a sweep needs to find the expired ones without a walk.
-- used_at is the later of its last upload to the case and the end of the last job
-- that used it and whose row is gone (while the row is there, the row tells).
CREATE TABLE objects (
  tenant          text NOT NULL,
  case_id         text NOT NULL,
  sha256          text NOT NULL,
  size            bigint NOT NULL,
  used_at       double precision NOT NULL,
  PRIMARY KEY (tenant, case_id, sha256)
);
CREATE INDEX objects_used ON objects (used_at);

-- The objects the jobs of this store already name (uploaded before objects had rows).
INSERT INTO objects (tenant, case_id, sha256, size, used_at)
SELECT j.tenant, j.case_id, lower(i.value ->> 'sha256'), (i.value ->> 'size')::bigint,
       min(j.created_at)
  FROM jobs AS j, jsonb_array_elements(j.input::jsonb -> 'items') AS i(value)
 WHERE j.kind = 'sign_case' AND j.case_id IS NOT NULL
   AND i.value ->> 'object_ref' LIKE 'sha256:%'
 GROUP BY 1, 2, 3, 4
ON CONFLICT DO NOTHING;

-- An artifact's case, so that a hold and an erasure find it after its job row is gone.
ALTER TABLE artifacts ADD COLUMN case_id text;
UPDATE artifacts SET case_id = j.case_id FROM jobs AS j WHERE j.job_id = artifacts.job_id;
CREATE INDEX artifacts_created ON artifacts (created_at);
CREATE INDEX artifacts_case ON artifacts (tenant, case_id);

-- Terminal jobs by when they ended (jobs_s, rejected_s) and the jobs of a case.
CREATE INDEX jobs_finished ON jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'canceled');
CREATE INDEX jobs_case ON jobs (tenant, case_id);

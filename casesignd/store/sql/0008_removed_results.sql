-- "Removed by retention" has one meaning: a succeeded job whose artifact retention or
-- an erasure removed keeps its row, and its result keeps the digest and size and
-- gains removed_at (casesignd.store.lifecycle). Jobs whose artifact went before the
-- result said so take the time from the removal's audit event.
UPDATE jobs SET result = json_set(result, '$.artifact.removed_at', (
    SELECT (julianday(e.at) - 2440587.5) * 86400.0 FROM events AS e
     WHERE e.type = 'artifact_removed' AND e.tenant = jobs.tenant
       AND json_extract(e.detail, '$.artifact_id') = json_extract(jobs.result, '$.artifact.artifact_id')
     ORDER BY e.seq LIMIT 1))
 WHERE state = 'succeeded' AND json_extract(result, '$.artifact.artifact_id') IS NOT NULL
   AND json_extract(result, '$.artifact.removed_at') IS NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS a
                    WHERE a.artifact_id = json_extract(jobs.result, '$.artifact.artifact_id'))
   AND EXISTS (SELECT 1 FROM events AS e
                WHERE e.type = 'artifact_removed' AND e.tenant = jobs.tenant
                  AND json_extract(e.detail, '$.artifact_id')
                      = json_extract(jobs.result, '$.artifact.artifact_id'));

-- The objects a removal recorded, by case: a job that still names one is sound (what
-- went was removed, not lost), and store check and backup ask this of each.
CREATE INDEX events_object_removed ON events (tenant, case_id) WHERE type = 'object_removed';

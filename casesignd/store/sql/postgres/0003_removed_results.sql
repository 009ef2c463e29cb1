-- "Removed by retention" has one meaning: a succeeded job whose artifact retention or
-- an erasure removed keeps its row, and its result keeps the digest and size and
-- gains removed_at (casesignd.store.lifecycle). Jobs whose artifact went before the
-- result said so take the time from the removal's audit event.
UPDATE jobs SET result = jsonb_set(result::jsonb, '{artifact,removed_at}', to_jsonb(r.at))::text
  FROM (SELECT DISTINCT ON (e.tenant, e.detail::jsonb ->> 'artifact_id')
               e.tenant, e.detail::jsonb ->> 'artifact_id' AS artifact_id,
               extract(epoch FROM e.at::timestamptz)::double precision AS at
          FROM events AS e WHERE e.type = 'artifact_removed'
         ORDER BY e.tenant, e.detail::jsonb ->> 'artifact_id', e.seq) AS r
 WHERE jobs.state = 'succeeded' AND r.tenant = jobs.tenant
   AND r.artifact_id = jobs.result::jsonb #>> '{artifact,artifact_id}'
   AND jobs.result::jsonb #> '{artifact,removed_at}' IS NULL
   AND NOT EXISTS (SELECT 1 FROM artifacts AS a WHERE a.artifact_id = r.artifact_id);

-- The objects a removal recorded, by case: a job that still names one is sound (what
-- went was removed, not lost), and store check and backup ask this of each.
CREATE INDEX events_object_removed ON events (tenant, case_id) WHERE type = 'object_removed';

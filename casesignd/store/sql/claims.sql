-- Named statements of the SQLite store's claims among tenants (casesignd.store.claims).

-- name: pause_claims
INSERT OR IGNORE INTO pauses (tenant, kind, since, actor) VALUES (:tenant, :kind, :now, :actor);

-- name: resume_claims
DELETE FROM pauses WHERE tenant = :tenant AND kind = :kind;

-- name: list_pauses
SELECT tenant, kind, since, actor FROM pauses ORDER BY since, tenant, kind;

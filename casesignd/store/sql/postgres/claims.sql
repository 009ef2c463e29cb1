-- Named statements of the PostgreSQL store's claims among tenants (casesignd.store.claims).

-- name: pause_claims
INSERT INTO pauses (tenant, kind, since, actor) VALUES (%(tenant)s, %(kind)s, %(now)s, %(actor)s)
ON CONFLICT DO NOTHING;

-- name: resume_claims
DELETE FROM pauses WHERE tenant = %(tenant)s AND kind = %(kind)s;

-- name: list_pauses
SELECT tenant, kind, since, actor FROM pauses ORDER BY since, tenant, kind;

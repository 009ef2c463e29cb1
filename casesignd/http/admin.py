"""The operator's API under ``/v1/admin`` (CONTRACT.md, "Tenants, limits and operators"):
the whole service across tenants, for the operator's token alone.

- ``GET /v1/admin/queues``: jobs waiting, running and failed per tenant and kind, the
  oldest wait of each, every tenant's limits, and the pauses in force;
- ``GET /v1/admin/nodes``: the daemons on the store, the leases each holds and when it
  last renewed them (its heartbeat);
- ``GET /v1/admin/dead-letter``: failed jobs of every tenant (``state=queued``: the
  queued ones), narrowed by tenant, kind and error code;
- ``POST /v1/admin/jobs/retry`` and ``/cancel``: many jobs at once, chosen by id or by
  filter, each through the tenant's own verb (``replay``, ``cancel``), which audits it
  with the actor ``operator``;
- ``POST /v1/admin/pause`` and ``/resume``: claims of a kind, a tenant or both held and
  let go on every daemon (the store's pause verbs, audited).

Any other token, a tenant's among them, is answered 404 on every one of these paths
(:func:`casesignd.http.common.authenticate_operator`); the operator's token reaches no
tenant path (401 there): the operator reads tenants' jobs here, never as one of them.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from aiohttp import web

from casesignd.core import audit
from casesignd.core.errors import CasesignError, ValidationError
from casesignd.core.fields import query_integer
from casesignd.engine import jobs
from casesignd.http.common import authenticate_operator, json_response, read_json, services_of
from casesignd.http.services import HandlerServices
from casesignd.store import Job

ACTOR = "operator"
# Jobs one bulk request changes at most; a filter that matches more says so ("more").
BULK_MAX = 500
_JOB_ID = re.compile(r"job_[0-9a-f]{28}")
_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_WAITING = ("queued", "retry_wait")
# What the dead letter's listing may show besides the failed jobs: the queued ones, to
# cancel.
_LISTED = ("failed", "queued")


def _tenant(s: HandlerServices, value: Any, field: str) -> str | None:
    """A configured tenant's name, or None when ``value`` is absent."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or all(t.name != value for t in s.config.tenants):
        raise ValidationError("no configured tenant of that name", code="invalid_field",
                              field=field)
    return value


def _word(value: Any, pattern: re.Pattern[str], field: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValidationError(f"{field} must be a lower-case word", code="invalid_field",
                              field=field)
    return value


def _kind(s: HandlerServices, value: Any, field: str = "kind") -> str | None:
    kind = _word(value, _KIND, field)
    if kind is not None and kind not in s.kinds:
        raise ValidationError("no job kind of that name", code="unknown_kind", field=field)
    return kind


def admin_job(s: HandlerServices, job: Job, now: float) -> dict[str, Any]:
    """The job resource, with the tenant it belongs to."""
    return {"tenant": job.tenant, **jobs.resource(s, job, now)}


# --- reads --------------------------------------------------------------------------


async def queues(request: web.Request) -> web.Response:
    s = services_of(request)
    authenticate_operator(request)
    now = time.time()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in await s.store.admin_queues():
        row = rows.setdefault((r["tenant"], r["kind"]), {
            "tenant": r["tenant"], "kind": r["kind"], "queued": 0, "retry_wait": 0,
            "running": 0, "failed": 0, "oldest_wait_s": None})
        row[r["state"]] = int(r["n"])
        if r["state"] in _WAITING and r["oldest"] is not None:
            age = round(max(0.0, now - float(r["oldest"])), 3)
            row["oldest_wait_s"] = max(row["oldest_wait_s"] or 0.0, age)
    tenants = [{"tenant": t.name, "limits": {
        "admit_rate": t.limits.admit_rate, "admit_window_s": t.limits.admit_window_s,
        "max_queued": t.limits.max_queued, "upload_bytes": t.limits.upload_bytes,
        "upload_window_s": t.limits.upload_window_s, "max_running": t.limits.max_running}}
        for t in s.config.tenants]
    return json_response({"queues": sorted(rows.values(), key=lambda r: (r["tenant"], r["kind"])),
                          "tenants": tenants, "pauses": await _pauses(s)})


async def _pauses(s: HandlerServices) -> list[dict[str, Any]]:
    return [{"tenant": p.tenant, "kind": p.kind, "since": audit.rfc3339(p.since),
             "actor": p.actor} for p in await s.store.list_pauses()]


async def nodes(request: web.Request) -> web.Response:
    """The daemons on the store: those connected now (PostgreSQL's sessions; a SQLite
    store has this one), with the leases their processes hold. A lease is renewed at
    each heartbeat to ``workers.lease_s`` ahead, so the latest expiry less lease_s is
    the node's last heartbeat."""
    s = services_of(request)
    authenticate_operator(request)
    lease_s = s.config.workers.lease_s
    found: dict[str, dict[str, Any]] = {}

    def node(name: str) -> dict[str, Any]:
        return found.setdefault(name, {"node": name, "connected": False, "connected_since": None,
                                       "processes": 0, "leases": 0, "last_heartbeat_at": None,
                                       "next_lease_expiry_at": None})

    for c in await s.store.connected_nodes():
        n = node(c["node"])
        n["connected"] = True
        n["connected_since"] = audit.rfc3339(float(c["since"])) if c["since"] else None
    if s.config.store.kind != "postgres":
        node(s.node)["connected"] = True  # the one daemon of its store: this one
    for h in await s.store.lease_holders():
        owner = str(h["lease_owner"])
        n = node(owner.rsplit(":", 2)[0] if owner.count(":") >= 2 else owner)
        n["processes"] += 1
        n["leases"] += int(h["n"])
        beat = float(h["latest"]) - lease_s
        soonest = float(h["soonest"])
        if n["last_heartbeat_at"] is None or beat > n["_beat"]:
            n["_beat"] = beat
            n["last_heartbeat_at"] = audit.rfc3339(beat)
        if n["next_lease_expiry_at"] is None or soonest < n["_soonest"]:
            n["_soonest"] = soonest
            n["next_lease_expiry_at"] = audit.rfc3339(soonest)
    out = [{k: v for k, v in n.items() if not k.startswith("_")}
           for n in sorted(found.values(), key=lambda n: n["node"])]
    return json_response({"nodes": out, "lease_s": lease_s})


async def dead_letter(request: web.Request) -> web.Response:
    s = services_of(request)
    authenticate_operator(request)
    q = request.query
    limit = query_integer(q.get("limit"), "limit", 50, 1, 200, code="invalid_limit")
    cursor = q.get("cursor") or None
    if cursor is not None and not _JOB_ID.fullmatch(cursor):
        raise ValidationError("cursor is not one this service gave out", code="invalid_cursor",
                              field="cursor")
    state = q.get("state") or "failed"
    if state not in _LISTED:
        raise ValidationError("state must be failed (the dead letter) or queued",
                              code="invalid_state", field="state")
    found, nxt = await s.store.dead_letter(
        tenant=_tenant(s, q.get("tenant"), "tenant"), kind=_kind(s, q.get("kind")),
        code=_word(q.get("code"), _CODE, "code"), limit=limit, cursor=cursor, state=state)
    now = time.time()
    return json_response({"jobs": [admin_job(s, j, now) for j in found], "next_cursor": nxt})


# --- bulk changes -------------------------------------------------------------------


async def _chosen(s: HandlerServices, body: dict[str, Any], state: str
                  ) -> tuple[list[tuple[str, str]], bool]:
    """(tenant, job id) of the jobs a bulk request names: ``job_ids``, or every job of
    ``state`` that the filter (``tenant``, ``kind``, ``code``) matches, up to BULK_MAX;
    and whether the filter matched more."""
    unknown = set(body) - {"job_ids", "tenant", "kind", "code"}
    if unknown:
        raise ValidationError("a field this request does not have", code="unknown_field",
                              field=sorted(unknown)[0])
    ids = body.get("job_ids")
    if ids is not None:
        if not isinstance(ids, list) or not ids or len(ids) > BULK_MAX or not all(
                isinstance(i, str) and _JOB_ID.fullmatch(i) for i in ids):
            raise ValidationError(f"job_ids must be 1-{BULK_MAX} job ids", code="invalid_field",
                                  field="job_ids")
        if set(body) & {"tenant", "kind", "code"}:
            raise ValidationError("name jobs by job_ids or by a filter, not both",
                                  code="invalid_field", field="job_ids")
        out = []
        for job_id in dict.fromkeys(ids):
            job = await s.store.find_job(job_id)
            out.append((job.tenant if job is not None else "", job_id))
        return out, False
    tenant = _tenant(s, body.get("tenant"), "tenant")
    if tenant is None:
        raise ValidationError("name the jobs by job_ids, or a tenant (with kind and code)",
                              code="missing_field", field="tenant")
    kind = _kind(s, body.get("kind"))
    code = _word(body.get("code"), _CODE, "code")
    if code is not None and state != "failed":
        raise ValidationError("only failed jobs have a code", code="invalid_field", field="code")
    found, nxt = await s.store.dead_letter(tenant=tenant, kind=kind, code=code,
                                           limit=BULK_MAX, cursor=None, state=state)
    return [(j.tenant, j.job_id) for j in found], nxt is not None


async def _bulk(request: web.Request, state: str, change: Any) -> web.Response:
    s = services_of(request)
    authenticate_operator(request)
    body = await read_json(request, s.config.server.max_json_bytes)
    chosen, more = await _chosen(s, body, state)

    async def one(tenant: str, job_id: str) -> dict[str, Any]:
        try:
            await change(s, tenant, job_id)
            return {"job_id": job_id}
        except CasesignError as e:
            return {"job_id": job_id, "code": e.code}

    # Each change is its own transaction; sent together, the writer commits them in
    # groups.
    results = await asyncio.gather(*(one(t, j) if t else _missing(j) for t, j in chosen))
    done = [r["job_id"] for r in results if "code" not in r]
    refused = [r for r in results if "code" in r]
    return json_response({"done": done, "refused": refused, "more": more})


async def _missing(job_id: str) -> dict[str, Any]:
    return {"job_id": job_id, "code": "job_not_found"}


async def _retry(s: HandlerServices, tenant: str, job_id: str) -> None:
    await s.store.replay(tenant, job_id, ACTOR, max_queue_depth=s.config.workers.max_queue_depth)
    s.pool.queued()


async def _cancel(s: HandlerServices, tenant: str, job_id: str) -> None:
    canceled = await s.store.cancel(tenant, job_id, ACTOR)
    s.metrics.job_finished(canceled.kind, "canceled")


async def retry_jobs(request: web.Request) -> web.Response:
    """Failed jobs queued again (a replay each, as ``POST /v1/jobs/{id}/retry``)."""
    return await _bulk(request, "failed", _retry)


async def cancel_jobs(request: web.Request) -> web.Response:
    """Queued jobs canceled (as ``POST /v1/jobs/{id}/cancel``)."""
    return await _bulk(request, "queued", _cancel)


# --- pauses -------------------------------------------------------------------------


async def _pause_change(request: web.Request, pause: bool) -> web.Response:
    s = services_of(request)
    authenticate_operator(request)
    body = await read_json(request, s.config.server.max_json_bytes)
    unknown = set(body) - {"tenant", "kind"}
    if unknown:
        raise ValidationError("a field this request does not have", code="unknown_field",
                              field=sorted(unknown)[0])
    tenant = _tenant(s, body.get("tenant"), "tenant")
    kind = _kind(s, body.get("kind"))
    verb = s.store.pause_claims if pause else s.store.resume_claims
    changed = await verb(kind, tenant, ACTOR)
    if not pause and changed:
        s.pool.queued()  # claims of it may start at once, here and on every daemon
    return json_response({"changed": changed, "pauses": await _pauses(s)})


async def pause(request: web.Request) -> web.Response:
    """Hold the claims of a kind, a tenant or both (neither: everything); admission
    goes on. ``changed`` is false when exactly that pause was in force already."""
    return await _pause_change(request, True)


async def resume(request: web.Request) -> web.Response:
    """Lift exactly the pause of that kind and tenant."""
    return await _pause_change(request, False)


ROUTES: tuple[tuple[str, str, Any], ...] = (
    ("GET", "/v1/admin/queues", queues),
    ("GET", "/v1/admin/nodes", nodes),
    ("GET", "/v1/admin/dead-letter", dead_letter),
    ("POST", "/v1/admin/jobs/retry", retry_jobs),
    ("POST", "/v1/admin/jobs/cancel", cancel_jobs),
    ("POST", "/v1/admin/pause", pause),
    ("POST", "/v1/admin/resume", resume),
)


async def other(request: web.Request) -> web.Response:
    """Any other method or path under ``/v1/admin``: 404 to whoever is not the operator,
    so that not even a 405 tells them which paths exist; the operator is told 405 (with
    ``Allow``) or 404 as on any other path."""
    authenticate_operator(request)
    allowed = {m for m, path, _ in ROUTES if path == request.path}
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


def add_routes(app: web.Application) -> None:
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    # Last, so that it answers only what no route above takes.
    app.router.add_route("*", "/v1/admin/{rest:.*}", other)

"""The HTTP API under /v1: cheap validation, durable admission, state from the store.

Every error, 4xx or 5xx, has the contract's shape and never a stack trace:
``{"error": {"code", "message", "field"?, "correlation_id"}}``. Details stay in the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from . import audit, httpsafe, jobs
from .app import SERVICES, Services
from .errors import (
    BadRequest,
    CasesignError,
    NotFound,
    RequestTimeout,
    ShuttingDown,
    TooLarge,
    Unauthorized,
    UnsupportedMediaType,
    ValidationError,
)
from .logs import log_event
from .metrics import aiohttp_middleware
from .store import Job, NewJob, random_hex

log = logging.getLogger("casesignd.api")

_CORRELATION = re.compile(r"[A-Za-z0-9._:-]{8,128}")
_JOB_ID = re.compile(r"job_[0-9a-f]{28}")
_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout",
    411: "length_required", 413: "too_large", 414: "uri_too_long", 415: "unsupported_media_type",
    431: "headers_too_large",
}
_json = msgspec.json.Encoder()


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_json.encode(data), status=status, headers=headers,
                        content_type="application/json")


def error_body(code: str, message: str, correlation_id: str, field: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    err["correlation_id"] = correlation_id
    return {"error": err}


def middlewares(services: Services) -> list[Any]:
    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        request["t0"] = time.time()
        given = request.headers.get("X-Correlation-Id", "")
        cid = given if _CORRELATION.fullmatch(given) else random_hex(12)
        request["correlation_id"] = cid
        try:
            resp = await handler(request)
        except CasesignError as e:
            # Codes are constants of the exception tree, never built from input.
            services.metrics.allow("code", e.code)
            services.metrics.rejection(e.code)
            if e.status >= 500:
                log_event(log, "http.error", level=logging.WARNING, code=e.code, status=e.status,
                          correlation_id=cid, route=_route(request))
            resp = json_response(error_body(e.code, e.message, cid, e.field), e.status, e.headers)
        except HttpProcessingError as e:
            # The body's framing broke while a handler read it (a multipart line longer
            # than aiohttp reads, a bad chunk): the client's fault, never a 500.
            status = e.code if 400 <= e.code < 500 else 400
            code = _HTTP_CODES.get(status, "bad_request")
            services.metrics.rejection(code)
            resp = json_response(error_body(code, "the request body is malformed", cid), status)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            code = _HTTP_CODES.get(e.status, "bad_request" if e.status < 500 else "internal_error")
            services.metrics.rejection(code)
            resp = json_response(error_body(code, e.reason or code, cid), e.status)
            if e.status == 405 and "Allow" in e.headers:
                resp.headers["Allow"] = e.headers["Allow"]
        except Exception as e:  # noqa: BLE001 - the client gets a correlation id, the log the rest
            log_event(log, "http.internal_error", level=logging.ERROR, correlation_id=cid,
                      route=_route(request), error=f"{type(e).__name__}: {e}", exc_info=e)
            services.metrics.rejection("internal_error")
            resp = json_response(
                error_body("internal_error", "internal error; quote the correlation id", cid), 500)
        resp.headers["X-Correlation-Id"] = cid
        return resp

    services.metrics.allow("code", *_HTTP_CODES.values(), "internal_error")
    return [errors, aiohttp_middleware(services.metrics)]


def _route(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


def _services(request: web.Request) -> Services:
    return request.app[SERVICES]


def authenticate(request: web.Request) -> str:
    """The tenant behind the bearer token. Tokens are stored only as SHA-256 digests and
    compared in constant time against every tenant."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).hexdigest()
    found = None
    for known, tenant in _services(request).tenants.items():
        if hmac.compare_digest(known, digest):
            found = tenant
    if found is None:
        raise Unauthorized("the bearer token is not valid", code="invalid_token",
                           headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    return found


def body_deadline(request: web.Request) -> float:
    """When the request's body must be in: server.request_timeout_s after its arrival
    (event-loop time, for asyncio.timeout_at)."""
    timeout_s = _services(request).config.server.request_timeout_s
    return asyncio.get_running_loop().time() + timeout_s - (time.time() - request["t0"])


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes, within server.request_timeout_s.

    One ``read`` returns only what has arrived so far, so read until the end: a body
    sent in several segments is still one body.
    """
    buf = bytearray()
    try:
        async with asyncio.timeout_at(body_deadline(request)):
            while chunk := await request.content.read(limit + 1 - len(buf)):
                buf += chunk
                if len(buf) > limit:
                    raise TooLarge(f"the body is larger than {limit} bytes")
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    return bytes(buf)


async def timed_chunks(request: web.Request, chunk_bytes: int) -> AsyncIterator[bytes]:
    """The body in chunks; a pause longer than server.request_timeout_s ends it with 408.

    Object uploads may be large, so the timeout bounds each wait, not the whole body.
    """
    timeout_s = _services(request).config.server.request_timeout_s
    chunks = request.content.iter_chunked(chunk_bytes).__aiter__()
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout("the request body stalled") from None
        yield chunk


async def read_json(request: web.Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object, within ``limit`` bytes."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType("the body must be application/json")
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"the body is larger than {limit} bytes")
    raw = await read_body(request, limit)
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise BadRequest("the body is not valid JSON", code="malformed_json") from None
    if not isinstance(data, dict):
        raise ValidationError("the body must be a JSON object", code="invalid_body")
    return data


def job_resource(services: Services, job: Job, now: float | None = None) -> dict[str, Any]:
    """The contract's job resource."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "kind": job.kind,
        "case_id": job.case_id,
        "state": jobs.client_state(job.state),
        "attempts": job.attempt,
        "version": job.version,
        "created_at": audit.rfc3339(job.created_at),
        "updated_at": audit.rfc3339(job.updated_at),
        "timings": jobs.timings(job, now),
    }
    if job.state == "succeeded":
        result = job.result_dict() or {}
        artifact = result.get("artifact")
        if artifact:
            url, expires = services.link(artifact["artifact_id"], job.tenant)
            out["result"] = {
                "artifact_id": artifact["artifact_id"], "sha256": artifact["sha256"],
                "size": artifact["size"], "media_type": artifact["media_type"],
                "download_url": url, "expires_at": audit.rfc3339(expires),
            }
        else:
            out["result"] = {"detail": result.get("detail", {})}
    if job.state == "failed":
        out["error"] = {"category": job.error_category, "code": job.error_code,
                        "correlation_id": job.correlation_id}
    return out


# --- jobs --------------------------------------------------------------------------------


async def post_job(request: web.Request) -> web.Response:
    s = _services(request)
    tenant = authenticate(request)
    if s.shutting_down:
        raise ShuttingDown("the daemon is shutting down", headers={"Retry-After": "5"})
    body = await read_json(request, s.config.server.max_json_bytes)
    header = jobs.check_idempotency_key(request.headers.get("Idempotency-Key"))
    kind_name = body.get("kind")
    if kind_name is None:
        raise ValidationError("kind is required", code="missing_field", field="kind")
    kind = s.kinds.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise ValidationError("unknown job kind; see the OpenAPI document",
                              code="unknown_kind", field="kind")
    admission = kind.admit(body, s.config)
    if admission.declared_bytes > s.config.workers.max_inflight_bytes:
        raise TooLarge("the job's documents are larger than the worker pool's byte budget")
    normalized = audit.canonical(admission.normalized)
    key_material = admission.key_material if admission.key_material is not None else admission.normalized
    new = NewJob(
        tenant=tenant, kind=kind.name, case_id=admission.case_id,
        idem_key=jobs.idempotency_key(header, kind.name, key_material),
        fingerprint=jobs.fingerprint(kind.name, admission.fingerprint_material
                                     if admission.fingerprint_material is not None
                                     else admission.normalized),
        input=normalized.decode(), input_digest=jobs.sha256_hex(normalized),
        version=admission.version, declared_bytes=admission.declared_bytes,
        created_at=request["t0"], correlation_id=request["correlation_id"],
        sig_key=admission.sig_key,
    )
    job, created = await s.holds.admit(new, actor=f"api:{tenant}",
                                       max_queue_depth=s.config.workers.max_queue_depth)
    if created:
        assert s.pool is not None
        s.pool.wake()
        s.metrics.job_admitted(kind.name, time.time() - request["t0"])
    else:
        s.metrics.idempotent_replay("/v1/jobs")
    return json_response(job_resource(s, job), 202 if created else 200,
                         {"Location": f"/v1/jobs/{job.job_id}"})


async def _tenant_job(request: web.Request) -> tuple[Services, str, Job]:
    s = _services(request)
    tenant = authenticate(request)
    job_id = request.match_info["job_id"]
    job = await s.store.get_job(tenant, job_id) if _JOB_ID.fullmatch(job_id) else None
    if job is None:
        raise NotFound("no such job", code="job_not_found")
    return s, tenant, job


async def get_job(request: web.Request) -> web.Response:
    s, _, job = await _tenant_job(request)
    return json_response(job_resource(s, job))


async def list_jobs(request: web.Request) -> web.Response:
    s = _services(request)
    tenant = authenticate(request)
    q = request.query
    states = None
    if q.get("state"):
        if q["state"] not in jobs.CLIENT_STATES:
            raise ValidationError("state must be one of " + ", ".join(sorted(jobs.CLIENT_STATES)),
                                  code="invalid_state", field="state")
        states = jobs.engine_states(q["state"])
    try:
        limit = int(q.get("limit", "50"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 200:
        raise ValidationError("limit must be an integer from 1 to 200", code="invalid_limit",
                              field="limit")
    cursor = q.get("cursor") or None
    if cursor is not None and not _JOB_ID.fullmatch(cursor):
        raise ValidationError("cursor is not one this service gave out", code="invalid_cursor",
                              field="cursor")
    found, nxt = await s.store.list_jobs(tenant, states, limit, cursor)
    now = time.time()
    return json_response({"jobs": [job_resource(s, j, now) for j in found], "next_cursor": nxt})


async def job_events(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    return json_response({"events": await s.store.events(tenant, job.job_id)})


async def retry_job(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    replayed = await s.store.replay(tenant, job.job_id, f"api:{tenant}")
    assert s.pool is not None
    s.pool.wake()
    return json_response(job_resource(s, replayed), 202)


async def cancel_job(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    canceled = await s.store.cancel(tenant, job.job_id, f"api:{tenant}")
    s.metrics.job_finished(canceled.kind, "canceled")
    return json_response(job_resource(s, canceled))


# --- objects and artifacts ----------------------------------------------------------------


async def put_object(request: web.Request) -> web.Response:
    s = _services(request)
    tenant = authenticate(request)
    limit = s.config.server.max_object_bytes
    result = await s.objects.put(
        tenant, request.match_info["case_id"], request.match_info["sha256"],
        timed_chunks(request, 1 << 20), limit, request.content_length)
    sha = request.match_info["sha256"].lower()
    return json_response({"case_id": request.match_info["case_id"], "sha256": sha,
                          "object_ref": f"sha256:{sha}", "size": result.size},
                         201 if result.created else 200)


async def get_artifact(request: web.Request) -> web.StreamResponse:
    s = _services(request)
    artifact_id = request.match_info["artifact_id"]
    record = await s.store.get_artifact(artifact_id)
    q = request.query
    if "sig" in q or "expires" in q:
        if record is None:
            raise NotFound("no such artifact", code="artifact_not_found")
        assert s.artifacts is not None
        s.artifacts.check_link(artifact_id, record["tenant"], q.get("expires", ""),
                               q.get("sig", ""), time.time())
    else:
        tenant = authenticate(request)
        if record is None or record["tenant"] != tenant:
            raise NotFound("no such artifact", code="artifact_not_found")
    source = await s.artifact_source(artifact_id)
    if source is None:
        raise NotFound("no such artifact", code="artifact_not_found")
    headers = {
        "Content-Type": record["media_type"],
        "X-Artifact-SHA256": record["sha256"],
        "Cache-Control": "private, no-store",
    }
    return artifact_response(source, headers, filename=artifact_id)


def artifact_response(source: bytes | Path, headers: dict[str, str],
                      filename: str | None = None) -> web.StreamResponse:
    """An artifact's bytes as kept in the store, or its file.

    Every download is safe to open: ``nosniff`` (a browser never runs it as something
    else than its Content-Type) and an ``attachment`` disposition (saved, never shown
    inline) under a name built from ``filename`` by
    :func:`casesignd.httpsafe.download_filename` (``signed`` when none is given)."""
    headers = {**headers, "X-Content-Type-Options": "nosniff"}
    media_type = headers.get("Content-Type", "application/pdf")
    headers["Content-Disposition"] = httpsafe.content_disposition(
        httpsafe.download_filename(filename or "signed", media_type))
    if isinstance(source, bytes):
        return web.Response(body=source, headers=headers)
    return web.FileResponse(source, headers=headers)


# --- operations -------------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    s = _services(request)
    checks: dict[str, dict[str, Any]] = {}
    try:
        await s.store.ping()
        checks["store"] = {"ok": True}
    except CasesignError as e:
        checks["store"] = {"ok": False, "detail": e.code}
    usage = s.temp.usage()
    checks["temp"] = {"ok": usage.free_bytes > 0 and usage.fs_free_bytes > 0,
                      "used_bytes": usage.used_bytes, "quota_bytes": usage.quota_bytes}
    checks["signing_key"] = {"ok": s.signer is not None,
                             **({} if s.signer is not None else {"detail": "no signing key loaded"})}
    pool = s.pool
    alive = pool is not None and pool.started and all(not t.done() for t in pool._tasks)
    checks["workers"] = {"ok": alive and not s.shutting_down}
    checks["cpu"] = {"ok": s.cpu_warm}
    if s.scanner is not None and hasattr(s.scanner, "ping"):
        ok = await s.scanner.ping()
        checks["scanner"] = {"ok": bool(ok)}
    ready = all(c["ok"] for c in checks.values())
    return json_response({"ready": ready, "checks": checks}, 200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    s = _services(request)
    body, content_type = s.metrics.render()
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = content_type
    return resp


async def openapi(request: web.Request) -> web.Response:
    from .openapi import document

    return json_response(document())


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_put("/v1/cases/{case_id}/objects/{sha256}", put_object)
    r.add_post("/v1/jobs", post_job)
    r.add_get("/v1/jobs", list_jobs)
    r.add_get("/v1/jobs/{job_id}", get_job)
    r.add_get("/v1/jobs/{job_id}/events", job_events)
    r.add_post("/v1/jobs/{job_id}/retry", retry_job)
    r.add_post("/v1/jobs/{job_id}/cancel", cancel_job)
    r.add_get("/v1/artifacts/{artifact_id}", get_artifact)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)
    r.add_get("/v1/openapi.json", openapi)

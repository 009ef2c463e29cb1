"""The HTTP API under /v1: cheap validation, durable admission, state from the store.

Every error, 4xx or 5xx, has the contract's shape and never a stack trace:
``{"error": {"code", "message", "field"?, "correlation_id"}}``. Details stay in the log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError

from casesignd.core.codes import FRAMEWORK_CODES, code_for_status
from casesignd.core.errors import (
    Busy,
    CasesignError,
    NotFound,
    RequestTimeout,
    ShuttingDown,
    TooLarge,
    UnsupportedMediaType,
    UploadQuota,
    ValidationError,
)
from casesignd.core.fields import query_integer
from casesignd.core.hashing import object_ref
from casesignd.core.logs import log_event
from casesignd.engine import jobs
from casesignd.files.envelope import plain_size
from casesignd.files.objects import check_case_id, normalize_sha256
from casesignd.http.answer_headers import answer_headers
from casesignd.http.common import (
    artifact_response,
    authenticate,
    error_body,
    json_response,
    read_body,
    read_json,
    route_name,
    services_of,
    timed_chunks,
)
from casesignd.http.services import SERVICES, HandlerServices
from casesignd.http.uploads import Upload, UploadGate
from casesignd.observability.metrics import aiohttp_middleware
from casesignd.pdf import render as pdfrender
from casesignd.store import Charge, Job, Pause, not_cancelable, not_failed, random_hex
from casesignd.verify import validate as verify

log = logging.getLogger("casesignd.http.api")

_CORRELATION = re.compile(r"[A-Za-z0-9._:-]{8,128}")
_JOB_ID = re.compile(r"job_[0-9a-f]{28}")
_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")


def middlewares(services: HandlerServices) -> list[Any]:
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
                          correlation_id=cid, route=route_name(request))
            resp = json_response(error_body(e.code, e.message, cid, e.field, reason=e.reason,
                                            where=e.where), e.status, e.headers)
        except HttpProcessingError as e:
            # The body's framing broke while a handler read it (a multipart line longer
            # than aiohttp reads, a bad chunk): the client's fault, never a 500.
            status = e.code if 400 <= e.code < 500 else 400
            code = code_for_status(status)
            services.metrics.rejection(code)
            resp = json_response(error_body(code, "the request body is malformed", cid), status)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            code = code_for_status(e.status)
            services.metrics.rejection(code)
            resp = json_response(error_body(code, e.reason or code, cid), e.status)
            if e.status == 405 and "Allow" in e.headers:
                resp.headers["Allow"] = e.headers["Allow"]
        except ConnectionError:
            # The client went away mid-request (an upload cut off): nothing to answer
            # and nothing wrong here; what it left behind is cleaned up on the way out.
            log_event(log, "http.client_gone", correlation_id=cid, route=route_name(request))
            resp = json_response(error_body("bad_request", "the connection was lost", cid), 400)
        except Exception as e:  # noqa: BLE001 - the client gets a correlation id, the log the rest
            log_event(log, "http.internal_error", level=logging.ERROR, correlation_id=cid,
                      route=route_name(request), error=f"{type(e).__name__}: {e}", exc_info=e)
            services.metrics.rejection("internal_error")
            resp = json_response(
                error_body("internal_error", "internal error; quote the correlation id", cid), 500)
        resp.headers["X-Correlation-Id"] = cid
        return resp

    services.metrics.allow("code", *FRAMEWORK_CODES.values())
    # Tracing off installs nothing: no cost per request (casesignd.observability.tracing).
    traced = [services.tracing.middleware()] if services.tracing.enabled else []
    # Outside ``errors``: its answers, the router's 404 and 405 too, carry them.
    return [*traced, answer_headers, errors, aiohttp_middleware(services.metrics)]


def job_resource(services: HandlerServices, job: Job, now: float | None = None,
                 pauses: Sequence[Pause] = ()) -> dict[str, Any]:
    """The contract's job resource (:func:`casesignd.engine.jobs.resource`); ``pauses``:
    the store's as shown (:func:`pauses_of`), which say whether a waiting job is paused."""
    return jobs.resource(services, job, now,
                         paused=any(p.covers(job.kind, job.tenant) for p in pauses))


async def pauses_of(services: HandlerServices, *shown: Job) -> list[Pause]:
    """The store's pauses when one of the jobs ``shown`` waits (none read otherwise), as
    this daemon keeps them: no store read per answer (casesignd.store.claims)."""
    return await services.store.shown_pauses() if any(map(jobs.waiting, shown)) else []


# --- jobs --------------------------------------------------------------------------------


async def post_job(request: web.Request) -> web.Response:
    s = services_of(request)
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
    webhook = _webhook(s, tenant, body)
    schedule = jobs.schedule(body)
    admission = kind.admit(body, s.config, tenant)
    if webhook is not None:
        # Stored with the input, so the fingerprint covers it, and the store's writers
        # find it when the job's state changes (casesignd.store.outbox).
        admission = dataclasses.replace(
            admission, normalized={**admission.normalized, "webhook": webhook},
            fingerprint_material=None if admission.fingerprint_material is None
            else {**admission.fingerprint_material, "webhook": webhook})
    if admission.declared_bytes > s.config.workers.max_inflight_bytes:
        raise TooLarge("the job's documents are larger than the worker pool's byte budget")
    new = admission.new_job(kind.name, tenant, idempotency_header=header,
                            created_at=request["t0"], correlation_id=request["correlation_id"],
                            traceparent=s.tracing.of_request(request), schedule=schedule)
    job, created = await s.reservations.admit(
        new, actor=f"api:{tenant}", max_queue_depth=s.config.workers.max_queue_depth,
        limits=s.config.limits_of(tenant))
    if created:
        s.pool.queued()
        s.metrics.job_admitted(kind.name, time.time() - request["t0"])
        waited_s = await s.pool.pacer.admitted()
        if waited_s:
            s.metrics.ack_paced(waited_s)
    else:
        s.metrics.idempotent_replay("/v1/jobs")
    return json_response(job_resource(s, job, pauses=await pauses_of(s, job)),
                         202 if created else 200,
                         {"Location": f"/v1/jobs/{job.job_id}"})


def _webhook(s: HandlerServices, tenant: str, body: dict[str, Any]) -> str | None:
    """The endpoint a job names (taken out of ``body``): one of its tenant's, by
    name; a URL, or another tenant's name, is refused like any unknown name."""
    name = body.pop("webhook", None)
    if name is not None and (not isinstance(name, str) or s.config.webhook(tenant, name) is None):
        raise ValidationError("no webhook endpoint of that name for this tenant",
                              code="unknown_webhook", field="webhook")
    return name


async def list_deliveries(request: web.Request) -> web.Response:
    """A tenant's webhook deliveries, newest first (``job_id=``: one job's)."""
    s = services_of(request)
    tenant = authenticate(request)
    limit = query_integer(request.query.get("limit"), "limit", 50, 1, 200, code="invalid_limit")
    job_id = request.query.get("job_id")
    found = await s.store.list_deliveries(tenant, limit, job_id=job_id)
    return json_response({"deliveries": [d.public() for d in found]})


async def redeliver(request: web.Request) -> web.Response:
    """Send one of the tenant's deliveries again (one more attempt, due now)."""
    s = services_of(request)
    tenant = authenticate(request)
    found = await s.store.redeliver(tenant, request.match_info["delivery_id"])
    if found is None:
        raise NotFound("no such delivery", code="delivery_not_found")
    return json_response(found.public(), 202)


async def _tenant_job(request: web.Request) -> tuple[HandlerServices, str, Job]:
    s = services_of(request)
    tenant = authenticate(request)
    job_id = request.match_info["job_id"]
    job = None
    if _JOB_ID.fullmatch(job_id):
        # A kiosk job answered 504 before its row was written reads as that row will;
        # asked first, as it is dropped only once the row is there: never a 404 between.
        job = s.reservations.late_job(tenant, job_id) or await s.store.get_job(tenant, job_id)
    if job is None:
        raise NotFound("no such job", code="job_not_found")
    return s, tenant, job


async def get_job(request: web.Request) -> web.Response:
    s, _, job = await _tenant_job(request)
    return json_response(job_resource(s, job, pauses=await pauses_of(s, job)))


async def list_jobs(request: web.Request) -> web.Response:
    s = services_of(request)
    tenant = authenticate(request)
    q = request.query
    states = None
    if q.get("state"):
        if q["state"] not in jobs.CLIENT_STATES:
            raise ValidationError("state must be one of " + ", ".join(sorted(jobs.CLIENT_STATES)),
                                  code="invalid_state", field="state")
        states = jobs.engine_states(q["state"])
    limit = query_integer(q.get("limit"), "limit", 50, 1, 200, code="invalid_limit")
    cursor = q.get("cursor") or None
    if cursor is not None and not _JOB_ID.fullmatch(cursor):
        raise ValidationError("cursor is not one this service gave out", code="invalid_cursor",
                              field="cursor")
    kind = q.get("kind") or None
    if kind is not None and not _KIND.fullmatch(kind):
        raise ValidationError("kind must be a job kind's name", code="invalid_field",
                              field="kind")
    case_id = jobs.check_case_id(q["case_id"]) if q.get("case_id") else None
    found, nxt = await s.store.list_jobs(tenant, states, limit, cursor, kind=kind,
                                         case_id=case_id)
    now = time.time()
    pauses = await pauses_of(s, *found)
    return json_response({"jobs": [job_resource(s, j, now, pauses) for j in found],
                          "next_cursor": nxt})


async def job_events(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    return json_response({"events": await s.store.events(tenant, job.job_id)})


async def retry_job(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    if job.state == "running":  # a kiosk job not written yet among them
        raise not_failed()
    replayed = await s.store.replay(tenant, job.job_id, f"api:{tenant}",
                                    max_queue_depth=s.config.workers.max_queue_depth,
                                    max_queued=s.config.limits_of(tenant).max_queued)
    s.pool.queued()
    return json_response(job_resource(s, replayed, pauses=await pauses_of(s, replayed)), 202)


async def cancel_job(request: web.Request) -> web.Response:
    s, tenant, job = await _tenant_job(request)
    if job.state == "running":  # a kiosk job not written yet among them
        raise not_cancelable()
    canceled = await s.store.cancel(tenant, job.job_id, f"api:{tenant}")
    s.metrics.job_finished(canceled.kind, "canceled")
    return json_response(job_resource(s, canceled))


# --- objects and artifacts ----------------------------------------------------------------


def _upload_limits(s: HandlerServices, request: web.Request) -> dict[str, int]:
    """The gate's bounds for this upload; TooLarge past server.max_object_bytes."""
    server = s.config.server
    limit = server.max_object_bytes
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"the object is {request.content_length} bytes, the limit is {limit}",
                       detail={"reason": "max_object_bytes"})
    return {"max_uploads": server.max_uploads,
            "tenant_share": server.upload_share(len(s.config.tenants))}


async def expect_upload(request: web.Request) -> None:
    """``Expect: 100-continue`` on an upload: invite the body only if the upload would
    be admitted now. Otherwise nothing is sent, and put_object's refusal goes out
    before the client sends a byte of its body (RFC 9110 §10.1.1)."""
    if request.version != HttpVersion11 or \
            request.headers.get("Expect", "").lower() != "100-continue":
        return None  # an expectation it cannot meet is ignored; the handler answers
    s = services_of(request)
    try:
        request.app[UPLOAD_GATE].check(authenticate(request), request.content_length,
                                       **_upload_limits(s, request))
    except CasesignError:
        return None
    try:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    except ConnectionError:
        return None  # gone already: put_object's read finds out and says so
    request.writer.output_size = 0  # the answer itself is still to come (as aiohttp's own)
    return None


async def put_object(request: web.Request) -> web.Response:
    s = services_of(request)
    tenant = authenticate(request)
    limit = s.config.server.max_object_bytes
    gate = request.app[UPLOAD_GATE]
    try:
        # Before a byte of the body is read: a refused upload costs no disk.
        upload = gate.admit(tenant, request.content_length, **_upload_limits(s, request))
    except CasesignError as e:
        s.metrics.upload_refused(e.detail["reason"])
        raise
    result = None
    try:
        quota = await _charge_quota(s, tenant, request)
        try:
            result = await s.objects.put(
                tenant, request.match_info["case_id"], request.match_info["sha256"],
                _charged(timed_chunks(request, 1 << 20), upload), limit, request.content_length)
        finally:
            if quota is not None and (result is None or not result.created):
                await s.store.refund(quota)  # nothing new stored: nothing counted
    except (TooLarge, RequestTimeout, UploadQuota) as e:
        s.metrics.upload_refused(e.detail.get("reason", "max_object_bytes"))
        raise
    finally:
        gate.release(upload)
    sha = request.match_info["sha256"].lower()
    return json_response({"case_id": request.match_info["case_id"], "sha256": sha,
                          "object_ref": object_ref(sha), "size": result.size},
                         201 if result.created else 200)


async def _charge_quota(s: HandlerServices, tenant: str, request: web.Request) -> Charge | None:
    """The object's bytes taken of the tenant's upload quota ([tenants.limits]
    upload_bytes) before its body is read: 429 ``quota_exceeded`` past it. Such a
    tenant's uploads say their length (411 without it), so the quota holds exactly."""
    limits = s.config.limits_of(tenant)
    if not limits.upload_bytes:
        return None
    size = request.content_length
    if size is None:
        raise CasesignError("this tenant's uploads need a Content-Length (its upload quota)",
                            code="length_required")
    if size > limits.upload_bytes:
        raise TooLarge(f"the object is larger than this tenant's upload quota "
                       f"({limits.upload_bytes} bytes per {limits.upload_window_s} s)")
    return await s.store.charge_upload(tenant, size, limits)


async def head_object(request: web.Request) -> web.Response:
    """200 with the object's size as Content-Length when this tenant's case holds it,
    else 404: a client resuming an upload asks first, since a PUT of an object already
    there still reads and checks its whole body. Another tenant's or case's object is
    absent here, as everywhere."""
    s = services_of(request)
    tenant = authenticate(request)
    case_id = check_case_id(request.match_info["case_id"])
    sha = normalize_sha256(request.match_info["sha256"])
    path = s.objects.path(tenant, case_id, sha)  # a stat or two: cheap on the loop
    try:
        # A sealed object's plain size, from its size and header (no decryption).
        size = await asyncio.to_thread(plain_size, path) if path is not None else None
    except FileNotFoundError:  # removed (retention, erasure) since the look
        size = None
    if size is None:
        raise NotFound("the case holds no object of that digest")
    return web.Response(status=200, headers={"Content-Length": str(size)})


async def _charged(chunks: AsyncIterator[bytes], upload: Upload) -> AsyncIterator[bytes]:
    """``chunks``, each charged to ``upload`` before it is passed on to be written."""
    streamed = 0
    async for chunk in chunks:
        streamed += len(chunk)
        upload.grow(streamed)
        yield chunk


async def get_artifact(request: web.Request) -> web.StreamResponse:
    s = services_of(request)
    artifact_id = request.match_info["artifact_id"]
    q = request.query
    if "sig" in q or "expires" in q:
        # The signature first: a bad link learns nothing of whether the artifact exists.
        assert s.artifacts is not None
        tenant = s.artifacts.link_tenant(artifact_id, s.tenants.values(), q.get("expires", ""),
                                         q.get("sig", ""), time.time())
    else:
        tenant = authenticate(request)
    record = await s.store.get_artifact(artifact_id)
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
    return await artifact_response(source, headers, filename=artifact_id)


# --- validation -------------------------------------------------------------------------


class _VerifyGate:
    """Verify requests in flight: each holds its document in memory until a worker
    process has validated it, so they are bounded (by kiosk.max_concurrent), and so
    are one tenant's (validation.budget.max_inflight_per_tenant): a tenant's burst is
    answered busy before it fills the daemon's room for everyone else's."""

    def __init__(self) -> None:
        self.inflight = 0
        self.by_tenant: dict[str, int] = {}


_VERIFY_GATE = web.AppKey("verify_gate", _VerifyGate)
UPLOAD_GATE = web.AppKey("upload_gate", UploadGate)


def _verify_options(s: HandlerServices) -> verify.VerifyOptions:
    cfg = s.config
    try:
        roots = verify.read_trust_roots(cfg.path(p) for p in cfg.validation.trust_roots)
    except (OSError, ValueError) as e:
        # The daemon's own setup is at fault, not the request; its paths stay in the log.
        log_event(log, "verify.trust_roots_unreadable", level=logging.ERROR,
                  error=f"{type(e).__name__}: {e}")
        raise CasesignError("validation.trust_roots cannot be read; see the daemon's log",
                            code="unavailable",
                            headers={"Retry-After": "60"}) from None
    return verify.VerifyOptions.within(cfg.validation.budget, roots, cfg.validation.fetch,
                                       cfg.validation.fetch_timeout_s)


async def post_verify(request: web.Request) -> web.Response:
    """Validate a PDF's signatures (the body); 200 with the report, passed or not."""
    s = services_of(request)
    tenant = authenticate(request)
    if request.content_type != "application/pdf":
        raise UnsupportedMediaType("the body must be application/pdf")
    # The same bound as a kiosk document: validation holds the document in memory.
    limit = s.config.kiosk.max_document_bytes
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"the document is larger than kiosk.max_document_bytes ({limit})")
    gate = request.app[_VERIFY_GATE]
    mine = gate.by_tenant.get(tenant, 0)
    if mine >= s.config.validation.budget.max_inflight_per_tenant:
        raise Busy("too many verify requests of this tenant at once", headers={"Retry-After": "1"})
    if gate.inflight >= s.config.kiosk.max_concurrent:
        raise Busy("too many verify requests at once", headers={"Retry-After": "1"})
    gate.inflight += 1
    gate.by_tenant[tenant] = mine + 1
    try:
        data = await read_body(request, limit)
        options = _verify_options(s)
        # pyHanko is pure Python: in verify's own worker processes, never on the event
        # loop, nor in the batch or kiosk processes.
        report: verify.VerifyReport = await s.run_verify(tenant, verify.verify_bytes, data, options)
    finally:
        gate.inflight -= 1
        left = gate.by_tenant[tenant] - 1
        if left:
            gate.by_tenant[tenant] = left
        else:
            del gate.by_tenant[tenant]
    if _wants_xml(request):
        from casesignd.verify.etsi import MEDIA_TYPE, etsi_report

        body = etsi_report(report)
        return web.Response(body=body, headers={"Content-Type": f"{MEDIA_TYPE}; charset=utf-8"})
    return json_response(report.to_json())


def _wants_xml(request: web.Request) -> bool:
    """Accept: application/xml (ETSI TS 119 102-2) preferred over JSON; JSON otherwise."""
    best, best_q = "application/json", -1.0
    for part in request.headers.get("Accept", "").split(","):
        media, _, params = part.strip().partition(";")
        q = 1.0
        for p in params.split(";"):
            key, _, value = p.strip().partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media.strip() in ("application/xml", "text/xml", "application/json", "*/*") and q > best_q:
            best, best_q = media.strip(), q
    return best in ("application/xml", "text/xml")


# --- operations -------------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    s = services_of(request)
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
    checks["signing_certificate"] = s.longterm.readiness()
    pool = s.pool
    alive = pool.started and all(not t.done() for t in pool._tasks)
    checks["workers"] = {"ok": alive and not s.shutting_down}
    checks["cpu"] = {"ok": s.cpu_warm}
    # A document that needs a rewrite cannot be checked without the page renderers.
    renderers = pdfrender.readiness(p.normalize for p in s.config.policies)
    if renderers is not None:
        checks["renderers"] = renderers
    if s.scanner is not None and hasattr(s.scanner, "ping"):
        ok = await s.scanner.ping()
        checks["scanner"] = {"ok": bool(ok)}
    ready = all(c["ok"] for c in checks.values())
    return json_response({"ready": ready, "node": s.node, "checks": checks}, 200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    s = services_of(request)
    body, content_type = s.metrics.render()
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = content_type
    return resp


async def openapi(request: web.Request) -> web.Response:
    from casesignd.http.openapi import document

    return json_response(document())


def add_routes(app: web.Application) -> None:
    services = app[SERVICES]
    app[_VERIFY_GATE] = _VerifyGate()
    gate = app[UPLOAD_GATE] = UploadGate(services.config.storage.upload_quota_bytes)
    services.metrics.watch_uploads(lambda: gate.count, lambda: gate.bytes)
    r = app.router
    r.add_put("/v1/cases/{case_id}/objects/{sha256}", put_object, expect_handler=expect_upload)
    r.add_head("/v1/cases/{case_id}/objects/{sha256}", head_object)
    r.add_post("/v1/jobs", post_job)
    r.add_get("/v1/jobs", list_jobs)
    r.add_get("/v1/jobs/{job_id}", get_job)
    r.add_get("/v1/jobs/{job_id}/events", job_events)
    r.add_post("/v1/jobs/{job_id}/retry", retry_job)
    r.add_post("/v1/jobs/{job_id}/cancel", cancel_job)
    r.add_get("/v1/artifacts/{artifact_id}", get_artifact)
    r.add_get("/v1/webhooks/deliveries", list_deliveries)
    r.add_post("/v1/webhooks/deliveries/{delivery_id}/redeliver", redeliver)
    r.add_post("/v1/verify", post_verify)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)
    r.add_get("/v1/openapi.json", openapi)

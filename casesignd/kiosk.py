"""The kiosk path, ``POST /v1/sign``: one signed PDF within a hard deadline, or a clear
refusal — never a late or partial answer.

A kiosk request is a ``sign_case`` job with one contract: the same manifest
validation, the same audit events, the same artifact store and the same signature
key, so a caller can move between the paths without a second compliance model. It
does not wait in the queue: it takes a signing slot reserved for kiosks (or a free
batch one) at once, or answers 503 ``busy``; it runs in its own CPU process, which
batch work never uses. The deadline counts from the request's arrival; when it
passes, the daemon answers 504 ``deadline_exceeded`` and lets the job finish in the
background, so whatever it signs is recorded and a replay returns it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

import msgspec
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from . import jobs
from .api import _services, authenticate, body_deadline
from .audit import canonical
from .errors import (
    BadRequest,
    Busy,
    CasesignError,
    Conflict,
    DeadlineExceeded,
    RequestTimeout,
    ShuttingDown,
    TooLarge,
    UnsupportedMediaType,
    ValidationError,
)
from .logs import log_event
from .signcase import SignCaseKind, field_name
from .store import Job, NewJob

log = logging.getLogger("casesignd.kiosk")

_MANIFEST_FIELDS = {"case_id", "policy_version", "signers", "sha256", "name"}
_MANIFEST_BYTES = 64 * 1024
_KIND = SignCaseKind()


def deadline_margin_s(deadline_s: float) -> float:
    """How long before the deadline the answer must be on its way (writing it out)."""
    return min(0.1, deadline_s * 0.05)


async def _read_part(part: BodyPartReader, limit: int, what: str) -> bytes:
    buf = bytearray()
    while chunk := await part.read_chunk(256 * 1024):
        buf += chunk
        if len(buf) > limit:
            raise TooLarge(f"the {what} is larger than {limit} bytes", field=what)
    return bytes(buf)


async def read_request(request: web.Request, max_document_bytes: int) -> tuple[dict[str, Any], bytes]:
    """The manifest (JSON) and the document (bytes) of a multipart/form-data request."""
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaType("the body must be multipart/form-data with parts manifest and document")
    if request.content_length is not None and request.content_length > max_document_bytes + _MANIFEST_BYTES:
        raise TooLarge(f"the document is larger than {max_document_bytes} bytes")
    manifest_raw = document = None
    try:
        # A body that stalls must not hold a kiosk slot: server.request_timeout_s.
        async with asyncio.timeout_at(body_deadline(request)):
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if not isinstance(part, BodyPartReader):
                    raise BadRequest("nested multipart is not accepted", code="invalid_multipart")
                if part.name == "manifest" and manifest_raw is None:
                    manifest_raw = await _read_part(part, _MANIFEST_BYTES, "manifest")
                elif part.name == "document" and document is None:
                    document = await _read_part(part, max_document_bytes, "document")
                else:
                    raise ValidationError(f"unexpected part {part.name!r}", code="unknown_field",
                                          field=str(part.name))
    except (ValueError, AssertionError, HttpProcessingError) as e:
        raise BadRequest("the multipart body is malformed", code="invalid_multipart") from e
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    if manifest_raw is None:
        raise ValidationError("the manifest part is missing", code="missing_field", field="manifest")
    if document is None:
        raise ValidationError("the document part is missing", code="missing_field", field="document")
    try:
        manifest = msgspec.json.decode(manifest_raw)
    except msgspec.DecodeError:
        raise BadRequest("the manifest is not valid JSON", code="malformed_json", field="manifest") from None
    if not isinstance(manifest, dict):
        raise ValidationError("the manifest must be a JSON object", code="invalid_body", field="manifest")
    return manifest, document


def sign_case_body(manifest: dict[str, Any], sha256: str, size: int) -> dict[str, Any]:
    """The kiosk manifest as the sign_case job it is (pure)."""
    for key in manifest:
        if key not in _MANIFEST_FIELDS:
            name = field_name(key)
            raise ValidationError(f"unknown field {name!r}", code="unknown_field", field=name)
    declared = manifest.get("sha256")
    if declared is not None and (not isinstance(declared, str) or declared.lower() != sha256):
        raise ValidationError("the document's SHA-256 differs from the manifest's",
                              code="digest_mismatch", field="sha256")
    body: dict[str, Any] = {
        "kind": "sign_case",
        "case_id": manifest.get("case_id"),
        "items": [{"role": "contract", "name": manifest.get("name", "document.pdf"),
                   "media_type": "application/pdf", "object_ref": f"sha256:{sha256}",
                   "sha256": sha256, "size": size}],
        "signers": manifest.get("signers", []),
    }
    if "policy_version" in manifest:
        body["policy_version"] = manifest["policy_version"]
    return body


def _job_error(job: Job) -> CasesignError:
    """The answer for a replay of a kiosk request whose job did not end well."""
    if job.state == "failed":
        status = 422 if job.error_category == "permanent_input" else 503
        return CasesignError("the signing request failed", code=job.error_code or "failed",
                             status=status)
    if job.state == "retry_wait":
        return CasesignError("signing failed for now; the job is retried in the background",
                             code=job.error_code or "transient_failure", status=503,
                             headers={"Retry-After": "5"})
    if job.state == "canceled":
        return Conflict("the job was canceled", code="job_canceled")
    return Conflict("the first request with this key is still running", code="in_progress",
                    headers={"Retry-After": "1"})


async def _answer(s: Any, job: Job, outcome: str, t0: float) -> web.StreamResponse:
    result = job.result_dict() or {}
    artifact = result.get("artifact") or {}
    path = s.artifacts.open_path(artifact.get("artifact_id", "")) if artifact else None
    if path is None:
        raise _job_error(job)
    s.metrics.observe_kiosk(outcome, time.time() - t0)
    return web.FileResponse(path, headers={
        "Content-Type": "application/pdf",
        "X-Job-Id": job.job_id,
        "X-Artifact-SHA256": artifact["sha256"],
        "Cache-Control": "private, no-store",
    })


async def post_sign(request: web.Request) -> web.StreamResponse:
    s = _services(request)
    t0 = request["t0"]
    cfg = s.config
    deadline = t0 + cfg.kiosk.deadline_ms / 1000
    margin = deadline_margin_s(cfg.kiosk.deadline_ms / 1000)
    try:
        return await _sign(request, s, t0, deadline - margin)
    except CasesignError as e:
        outcome = {"busy": "busy", "deadline_exceeded": "deadline_exceeded",
                   "in_progress": "in_progress"}.get(e.code, "rejected")
        s.metrics.observe_kiosk(outcome, time.time() - t0)
        raise


async def _sign(request: web.Request, s: Any, t0: float, answer_by: float) -> web.StreamResponse:
    cfg = s.config
    tenant = authenticate(request)
    if s.shutting_down:
        raise ShuttingDown("the daemon is shutting down", headers={"Retry-After": "5"})
    header = jobs.check_idempotency_key(request.headers.get("Idempotency-Key"))
    if s.kiosk_inflight >= cfg.kiosk.max_concurrent:
        raise Busy("too many kiosk requests at once", headers={"Retry-After": "1"})
    s.kiosk_inflight += 1
    try:
        manifest, document = await read_request(request, cfg.kiosk.max_document_bytes)
        sha = hashlib.sha256(document).hexdigest()
        body = sign_case_body(manifest, sha, len(document))
        admission = _KIND.admit(body, cfg)
        normalized = canonical(admission.normalized)
        new = NewJob(
            tenant=tenant, kind=_KIND.name, case_id=admission.case_id,
            idem_key=jobs.idempotency_key(header, _KIND.name, admission.key_material or {}),
            fingerprint=jobs.fingerprint(_KIND.name, admission.normalized),
            input=normalized.decode(), input_digest=jobs.sha256_hex(normalized),
            version=admission.version, declared_bytes=admission.declared_bytes,
            created_at=t0, correlation_id=request["correlation_id"])
        if time.time() >= answer_by:
            raise DeadlineExceeded("the request arrived too late to be signed in time")
        await s.objects.put(tenant, admission.case_id, sha, _once(document), len(document),
                            len(document))
        assert s.pool is not None
        job, created = await s.store.admit(new, actor=f"api:{tenant}", max_queue_depth=1 << 62,
                                           claim_by=s.pool.owner, lease_s=cfg.workers.lease_s)
        if not created:
            s.metrics.idempotent_replay("/v1/sign")
            if job.state == "succeeded":
                return await _answer(s, job, "replayed", t0)
            if job.state != "queued":
                raise _job_error(job)
            # A batch job for the same signature waits in the queue: run it now.
            claimed = await s.store.claim_job(job.job_id, s.pool.owner, cfg.workers.lease_s)
            if claimed is None:
                raise _job_error(job)
            job = claimed
        task = s.pool.run_kiosk(job, answer_by)
        try:
            done = await asyncio.wait_for(asyncio.shield(task), max(0.0, answer_by - time.time()))
        except TimeoutError:
            log_event(log, "kiosk.deadline_exceeded", level=logging.WARNING, job_id=job.job_id,
                      correlation_id=request["correlation_id"])
            raise DeadlineExceeded("the document could not be signed within the deadline; "
                                   "a replay returns it once it is signed",
                                   headers={"Retry-After": "1", "X-Job-Id": job.job_id}) from None
        if done is None:
            raise Conflict("the signing attempt lost its lease", code="in_progress",
                           headers={"Retry-After": "1"})
        if done.state != "succeeded":
            fresh = await s.store.get_job(tenant, done.job_id) or done
            raise _job_error(fresh)
        return await _answer(s, done, "succeeded", t0)
    finally:
        s.kiosk_inflight -= 1


async def _once(data: bytes) -> Any:
    yield data


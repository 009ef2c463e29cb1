"""The kiosk path, ``POST /v1/sign``: one signed PDF within a hard deadline, or a clear
refusal — never a late or partial answer.

A kiosk request is a ``sign_case`` job with one contract: the same manifest
validation, the same audit events, the same artifact store and the same signature
key, so a caller can move between the paths without a second compliance model. It
does not wait in the queue: it takes a signing slot reserved for kiosks (or a free
batch one) at once, or answers 503 ``busy``; it runs in its own CPU process, which
batch work never uses and which signs too when the key is one in memory. The
deadline counts from the request's arrival; when it passes, the daemon answers 504
``deadline_exceeded`` and lets the job finish in the background, so whatever it
signs is recorded and a replay returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from casesignd.core.errors import (
    BadRequest,
    Busy,
    CasesignError,
    Conflict,
    DeadlineExceeded,
    NotFound,
    RequestTimeout,
    ShuttingDown,
    TooLarge,
    UnsupportedMediaType,
    ValidationError,
)
from casesignd.core.fields import refuse_unknown
from casesignd.core.hashing import object_ref
from casesignd.core.logs import log_event
from casesignd.core.outcomes import Artifact, Finish, Outcome, RetryLater, Signature
from casesignd.engine import jobs
from casesignd.engine.attempt import JobAttempt, Traced
from casesignd.engine.recorder import AttemptId
from casesignd.http import formdata
from casesignd.http.common import (
    artifact_response,
    authenticate,
    body_deadline,
    decode_json,
    services_of,
)
from casesignd.http.download_headers import content_disposition, download_filename
from casesignd.http.services import HandlerServices
from casesignd.job_kinds.sign_case import (
    SignCaseKind,
    document_sha256,
    keep_signed,
    signature_key,
    signed_detail,
    signing_lock,
    signing_meta,
)
from casesignd.job_kinds.signing import signing_policy, stamp_logo
from casesignd.signing.ladder import policy_in_force
from casesignd.store import Flight, Job, NewJob, new_id

log = logging.getLogger("casesignd.http.kiosk")

_MANIFEST_FIELDS = {"case_id", "policy_version", "signers", "sha256", "name", "signature"}
_MANIFEST_BYTES = 64 * 1024
_KIND = SignCaseKind()
T = TypeVar("T")


# Before the answer is due, the time kept for writing down a job that will not make
# it (an object and a commit: milliseconds), so that the 504's job is there to read.
_PERSIST_S = 0.05


def deadline_margin_s(deadline_s: float) -> float:
    """How long before the deadline the answer must be on its way (writing it out)."""
    return min(0.1, deadline_s * 0.05)


async def read_request(request: web.Request, max_document_bytes: int) -> tuple[dict[str, Any], bytes]:
    """The manifest (JSON) and the document (bytes) of a multipart/form-data request."""
    content_type = request.headers.get("Content-Type", "")
    if formdata.media_type(content_type) != "multipart/form-data":
        raise UnsupportedMediaType("the body must be multipart/form-data with parts manifest and document")
    limit = max_document_bytes + _MANIFEST_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise TooLarge(f"the document is larger than {max_document_bytes} bytes")
    delimiter = formdata.boundary(content_type)
    body = bytearray()
    try:
        # A body that stalls must not hold a kiosk slot: server.request_timeout_s.
        async with asyncio.timeout_at(body_deadline(request)):
            while chunk := await request.content.read(1 << 20):
                body += chunk
                if len(body) > limit:
                    raise TooLarge(f"the document is larger than {max_document_bytes} bytes")
    except HttpProcessingError as e:
        raise BadRequest("the request body is malformed", code="invalid_multipart") from e
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    manifest_raw = document = None
    for name, content in formdata.parse(body, delimiter):
        if name == "manifest" and manifest_raw is None:
            if len(content) > _MANIFEST_BYTES:
                raise TooLarge(f"the manifest is larger than {_MANIFEST_BYTES} bytes", field="manifest")
            manifest_raw = bytes(content)
        elif name == "document" and document is None:
            if len(content) > max_document_bytes:
                raise TooLarge(f"the document is larger than {max_document_bytes} bytes",
                               field="document")
            document = bytes(content)
        else:
            # Never the part's name: it is the client's, like an unknown key.
            raise ValidationError("the body has an unexpected part; its parts are manifest "
                                  "and document", code="unknown_field")
    if manifest_raw is None:
        raise ValidationError("the manifest part is missing", code="missing_field", field="manifest")
    if document is None:
        raise ValidationError("the document part is missing", code="missing_field", field="document")
    manifest = decode_json(manifest_raw, field="manifest")
    if not isinstance(manifest, dict):
        raise ValidationError("the manifest must be a JSON object", code="invalid_body", field="manifest")
    return manifest, document


def sign_case_body(manifest: dict[str, Any], sha256: str, size: int) -> dict[str, Any]:
    """The kiosk manifest as the sign_case job it is (pure)."""
    refuse_unknown(manifest, _MANIFEST_FIELDS, "manifest")
    declared = manifest.get("sha256")
    if declared is not None and (not isinstance(declared, str) or declared.lower() != sha256):
        raise ValidationError("the document's SHA-256 differs from the manifest's",
                              code="digest_mismatch", field="sha256")
    body: dict[str, Any] = {
        "kind": "sign_case",
        "case_id": manifest.get("case_id"),
        "items": [{"role": "contract", "name": manifest.get("name", "document.pdf"),
                   "media_type": "application/pdf", "object_ref": object_ref(sha256),
                   "sha256": sha256, "size": size}],
        "signers": manifest.get("signers", []),
    }
    if "policy_version" in manifest:
        body["policy_version"] = manifest["policy_version"]
    if "signature" in manifest:
        body["signature"] = manifest["signature"]
    return body


def _job_error(job: Job) -> CasesignError:
    """The answer for a replay of a kiosk request whose job did not end well: its
    code's status, as the table of codes has it."""
    if job.state == "failed":
        refused = job.refusal() or {}
        return CasesignError(refused.get("message") or "the signing request failed",
                             code=job.error_code or "internal_error",
                             reason=refused.get("reason"), where=refused.get("where"))
    if job.state == "retry_wait":
        return CasesignError("signing failed for now; the job is retried in the background",
                             code=job.error_code or "transient_failure",
                             headers={"Retry-After": "5"})
    if job.state == "canceled":
        return Conflict("the job was canceled", code="job_canceled")
    if job.state == "succeeded":  # its artifact was removed (retention or an erasure)
        return NotFound("the signed result of this request is gone", code="artifact_not_found")
    return Conflict("the first request with this key is still running", code="in_progress",
                    headers={"Retry-After": "1"})


async def _answer(s: HandlerServices, job: Job, outcome: str, t0: float,
                  signed: bytes | None = None) -> web.StreamResponse:
    artifact = (job.result_dict() or {}).get("artifact")
    source = None
    if artifact:
        source = signed if signed is not None else await s.artifact_source(artifact["artifact_id"])
    if not artifact or source is None:
        raise _job_error(job)
    headers = {
        "Content-Type": "application/pdf",
        "X-Job-Id": job.job_id,
        "X-Artifact-SHA256": artifact["sha256"],
        "Cache-Control": "private, no-store",
    }
    s.metrics.observe_kiosk(outcome, time.time() - t0)
    return await artifact_response(source, headers)


async def post_sign(request: web.Request) -> web.StreamResponse:
    s = services_of(request)
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


async def _sign(request: web.Request, s: HandlerServices, t0: float, answer_by: float) -> web.StreamResponse:
    cfg = s.config
    tenant = authenticate(request)
    if s.shutting_down:
        raise ShuttingDown("the daemon is shutting down", headers={"Retry-After": "5"})
    header = jobs.check_idempotency_key(request.headers.get("Idempotency-Key"))
    if s.kiosk_inflight >= cfg.kiosk.max_concurrent:
        raise Busy("too many kiosk requests at once", headers={"Retry-After": "1"})
    # One tenant's share (kiosk.max_concurrent_per_tenant): its slow or hostile
    # documents (decompression bombs) never take every kiosk slot from the others.
    by_tenant = s.kiosk_inflight_by_tenant
    if by_tenant.get(tenant, 0) >= cfg.kiosk.tenant_share(len(cfg.tenants)):
        raise Busy("too many kiosk requests at once from this tenant",
                   headers={"Retry-After": "1"})
    s.kiosk_inflight += 1
    by_tenant[tenant] = by_tenant.get(tenant, 0) + 1

    def named(resp: web.StreamResponse) -> web.StreamResponse:
        # Saved as the case's signed document: an artifact id means nothing at a kiosk.
        resp.headers["Content-Disposition"] = content_disposition(
            download_filename(f"{new.case_id}-signed", "application/pdf"))
        return resp

    def release(_: Any = None) -> None:
        if by_tenant[tenant] > 1:
            by_tenant[tenant] -= 1
        else:
            del by_tenant[tenant]  # no entry for a tenant with nothing in flight

    task: asyncio.Task[Any] | None = None
    try:
        manifest, document = await read_request(request, cfg.kiosk.max_document_bytes)
        sha = await document_sha256(document)
        body = sign_case_body(manifest, sha, len(document))
        admission = _KIND.admit(body, cfg, tenant)
        new = admission.new_job(_KIND.name, tenant, idempotency_header=header, created_at=t0,
                                correlation_id=request["correlation_id"],
                                traceparent=s.tracing.of_request(request))
        if time.time() >= answer_by:
            raise DeadlineExceeded("the request arrived too late to be signed in time")
        flight = Flight(new=new, job_id=new_id("job", t0), actor=f"api:{tenant}",
                        owner=s.pool.owner, lease_s=cfg.workers.lease_s,
                        admitted_at=time.time(), claimed_at=0.0)
        sig_key = admission.sig_key or signature_key(admission.normalized)
        existing, recorded = await s.reservations.reserve(tenant, new.idem_key, sig_key, flight.token)
        if existing is not None:
            return named(await _replay(s, new, t0, answer_by))
        run = _Run(s, flight, admission.normalized, document, sig_key, recorded, answer_by)
        task = asyncio.create_task(run.fly(), name=f"kiosk-{flight.job_id}")
        s.kiosk_flights.add(task)
        task.add_done_callback(_flown(s))
        try:
            # The last moments before the answer is due go to writing the job down.
            job, signed = await asyncio.wait_for(
                asyncio.shield(task), max(0.0, answer_by - _PERSIST_S - time.time()))
        except TimeoutError:
            persisted = run.late()
            await asyncio.wait([task, persisted], timeout=max(0.0, answer_by - time.time()),
                               return_when=asyncio.FIRST_COMPLETED)
            if task.done() and not task.cancelled():
                job, signed = task.result()  # its own error, if it ended in one
                return named(await _answer_flight(s, job, signed, t0))
            log_event(log, "kiosk.deadline_exceeded", level=logging.WARNING, job_id=flight.job_id,
                      correlation_id=request["correlation_id"])
            raise _too_late(flight.job_id) from None
        return named(await _answer_flight(s, job, signed, t0))
    finally:
        s.kiosk_inflight -= 1
        if task is not None and not task.done():
            # Answered 504, its check goes on in a kiosk process: it keeps its place in
            # its tenant's share until it ends, or a tenant whose bombs outlast the
            # deadline would fill every kiosk process with them.
            task.add_done_callback(release)
        else:
            release()


def _too_late(job_id: str) -> DeadlineExceeded:
    return DeadlineExceeded("the document could not be signed within the deadline; "
                            "a replay returns it once it is signed",
                            headers={"Retry-After": "1", "X-Job-Id": job_id})


async def _answer_flight(s: HandlerServices, job: Job | None, signed: bytes | None,
                         t0: float) -> web.StreamResponse:
    if job is None:
        raise Conflict("the signing attempt lost its lease", code="in_progress",
                       headers={"Retry-After": "1"})
    if job.state != "succeeded":
        raise _job_error(job)
    return await _answer(s, job, "succeeded", t0, signed)


async def _replay(s: HandlerServices, new: NewJob, t0: float, answer_by: float) -> web.StreamResponse:
    """A request whose idempotency key names a job already: the recorded answer, or the
    queued batch job of the same signature run now."""
    cfg = s.config
    job, created = await s.reservations.admit(new, actor=f"api:{new.tenant}",
                                              max_queue_depth=1 << 62)
    assert not created  # the key named a job a moment ago, and jobs are never deleted
    s.metrics.idempotent_replay("/v1/sign")
    if job.state == "succeeded":
        return await _answer(s, job, "replayed", t0)
    if job.state != "queued":
        raise _job_error(job)
    claimed = await s.store.claim_job(job.job_id, s.pool.owner, cfg.workers.lease_s)
    if claimed is None:
        raise _job_error(job)
    task = s.pool.run_kiosk(claimed, answer_by)
    try:
        done = await asyncio.wait_for(asyncio.shield(task), max(0.0, answer_by - time.time()))
    except TimeoutError:
        raise _too_late(job.job_id) from None
    if done is not None and done.state != "succeeded":
        done = await s.store.get_job(new.tenant, done.job_id) or done
    return await _answer_flight(s, done, None, t0)


class _Run:
    """One kiosk signature, from the reserved key to the one write that records it: an
    attempt (:class:`~casesignd.engine.attempt.JobAttempt`) like the pool's, whose job
    is in the store only once its outcome is.

    Nothing is written before the end unless the deadline passes first: then the job
    is written as running (with its document as an object) so that it outlives a
    crash, and the work goes on and records its outcome like any attempt."""

    def __init__(self, s: HandlerServices, flight: Flight, normalized: dict[str, Any], document: bytes,
                 sig_key: str, recorded: dict[str, Any] | None, answer_by: float) -> None:
        self.s = s
        self.flight = flight
        self.normalized = normalized
        self.document = document
        self.sig_key = sig_key
        self.recorded = recorded
        self.answer_by = answer_by
        self.persisted: asyncio.Task[Any] | None = None
        new = flight.new
        self.attempt = JobAttempt(
            s.recorder, AttemptId(flight.job_id, 1, _KIND.name, new.correlation_id, "kiosk"),
            self._write)
        # Its phases go on its outcome's line (``phases_ms``), as every attempt's do.
        self.phase = self.attempt.phase
        self.record_phase = self.attempt.record_phase

    def late(self) -> asyncio.Task[Any]:
        """The answer is going out as 504: make the job durable while the work goes on.
        Until its row is written, the job reads from here (``KeyReservations.late_job``):
        the answer's ``X-Job-Id`` names a job from the moment it goes out."""
        if self.persisted is None:
            self.flight.claimed_at = self.flight.claimed_at or time.time()
            self.s.reservations.answered_late(self.flight)
            self.persisted = asyncio.create_task(self._persist())
        return self.persisted

    async def _persist(self) -> None:
        try:
            await self._put_document()
            await self.s.store.persist_flight(self.flight)
            self.s.reservations.landed(self.flight)
        except Exception as e:  # noqa: BLE001 - the outcome is still recorded at the end
            log_event(log, "kiosk.persist_failed", level=logging.WARNING, job_id=self.flight.job_id,
                      error=f"{type(e).__name__}: {e}")

    async def _put_document(self) -> None:
        # The digest is the manifest's, checked again as the object is written.
        new, doc = self.flight.new, self.document
        assert new.case_id is not None  # a sign_case job names its case
        await self.s.objects.put(new.tenant, new.case_id, self.normalized["items"][0]["sha256"],
                                 _once(doc), len(doc), len(doc))

    async def fly(self) -> tuple[Job | None, bytes | None]:
        s, flight = self.s, self.flight
        new = flight.new
        try:
            async with signing_lock(s, new.tenant, self.sig_key, self.recorded) as recorded:
                self.recorded = recorded
                flight.claimed_at = time.time()
                self.attempt.claimed(Traced(new.traceparent, new.tenant, new.declared_bytes,
                                            flight.admitted_at, flight.claimed_at))
                signed = await self._work()
                job = await self.attempt.record(flight.outcome)
                if signed is not None and not _answers_with(job, flight.outcome):
                    signed = None  # another signature of the key was recorded: answer that one
        except asyncio.CancelledError:
            s.reservations.unreserve(new.tenant, new.idem_key, flight.token)
            self.attempt.stopped("canceled")
            raise
        except Exception as e:  # noqa: BLE001 - every failure is decided by plan_retry
            if isinstance(e, Busy) and self.persisted is None:
                # Refused at once (503): nothing was done, so nothing is recorded.
                s.reservations.unreserve(new.tenant, new.idem_key, flight.token)
                self.attempt.stopped("busy")
                raise
            return await self._record_failure(e), None
        finally:
            # Recorded (the store answers for its job), or it never will be.
            s.reservations.landed(flight)
        return job, signed

    async def _write(self, outcome: Outcome) -> Job | None:
        """The attempt's outcome and, unless the deadline wrote it already, its job: one
        commit (:meth:`KeyReservations.record_flight`); then the job counts as admitted."""
        flight = self.flight
        flight.outcome = outcome
        if self.persisted is not None:
            await self.persisted
        job = await self.s.reservations.record_flight(flight)
        new = flight.new
        self.s.metrics.job_admitted(new.kind, max(0.0, flight.admitted_at - new.created_at))
        return job

    async def _work(self) -> bytes | None:
        """Validate, sign, publish; return the signed document (None when an earlier
        signature of the same key is reused and is answered from the artifact store)."""
        s, cfg, normalized = self.s, self.s.config, self.normalized
        recorded = self.recorded
        if recorded is not None and await s.artifact_source(recorded["artifact_id"]) is not None:
            artifact = Artifact(recorded["artifact_id"], recorded["sha256"], recorded["size"])
            self.flight.outcome = Finish(artifact, {"reused": True})
            return None
        policy = policy_in_force(cfg.policy(normalized["policy_version"]))
        ladder = s.ladder
        logo = await stamp_logo(s.branding, self.flight.new.tenant, policy)
        meta = signing_meta(normalized, policy, cfg.signing.signer_name, ladder.signer_subject(),
                            logo)
        if s.scanner is not None:
            # First: the worker process signs as soon as the document passes its checks.
            async with self.phase("scan"):
                await s.scanner.scan(self.document, normalized["items"][0]["name"])
        signing = signing_policy(policy)
        limits = signing.limits.bounded(cpu_s=cfg.kiosk.deadline_ms / 1000,
                                        inflated_bytes=cfg.kiosk.max_inflated_bytes)
        signed = await ladder.sign_bytes(_KioskSteps(self), self.document, meta=meta,
                                         policy=signing, limits=limits)
        base, appended = signed.base, signed.appended
        async with self.phase("publish"):
            published, inline, ours = await keep_signed(
                s, cfg, self.flight.new.tenant, self.sig_key, base, appended.tail, signed.sha256,
                appended.timestamp_expires_at)
        self.flight.outcome = Finish(published, {"documents": 1}, signature=Signature(
            self.sig_key, published, signed_detail(normalized, signed.checked, appended.level, meta),
            inline))
        document = inline if inline is not None else base + appended.tail
        # An earlier publication of the same signature key (a crash before its record)
        # is the one on disk: answer what is on disk.
        return document if ours else None

    async def _record_failure(self, error: BaseException) -> Job | None:
        s, flight = self.s, self.flight
        outcome = self.attempt.failed(error)
        try:
            # The job outlives this request (a retry, or a replay from the dead letter):
            # its document is kept like an uploaded object.
            await self._put_document()
            job = await self.attempt.record(outcome)
        except Exception as e:  # noqa: BLE001 - whatever failed, the key must not stay held
            self.attempt.not_recorded(e)
            s.reservations.unreserve(flight.new.tenant, flight.new.idem_key, flight.token)
            raise error from None
        if isinstance(outcome, RetryLater):
            s.pool.wake()
        return job


class _KioskSteps:
    """A kiosk request as the signing ladder's :class:`casesignd.signing.ladder.Steps`:
    its phases on its run's line, the kiosk's own CPU processes behind its tenant's
    gate, and the kiosk's key slots, each waited for at most :attr:`wait_s`. It holds
    no lease: nothing is written until its one record at the end."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self._wait_s: float | None = None

    @property
    def wait_s(self) -> float:
        """How long a wait for a process or a key slot may take: until the answer is
        due, or once it went out late, as long as any run; taken once, when the
        document's checks are about to begin."""
        if self._wait_s is None:
            run = self.run
            self._wait_s = (run.answer_by - time.time()) if run.persisted is None \
                else run.s.config.workers.max_run_s
        return self._wait_s

    def phase(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.run.phase(name)

    def record_phase(self, name: str, took: float) -> None:
        self.run.record_phase(name, took)

    async def check_lease(self) -> None:
        return None

    def key_slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.run.s.key_slots.kiosk(self.wait_s)

    async def in_process(self, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
        s = self.run.s
        # One tenant's documents take at most its share of the kiosk's processes
        # (and so of the key slots a process that signs holds): another tenant's
        # kiosk always finds one, whatever the first sends (decompression bombs).
        gate = _lane_gate(s, self.run.flight.new.tenant)
        if s.kiosk_signs_in_lane:
            # The process holds the key: its call is the key's use, under a key slot.
            async with _waiting(gate, self.wait_s), s.key_slots.kiosk(self.wait_s):
                start = time.perf_counter()  # a wait for the slot is no phase's time
                result = await s.run_cpu(fn, *args, kiosk=True)
        else:
            async with _waiting(gate, self.wait_s):
                start = time.perf_counter()
                result = await s.run_cpu(fn, *args, kiosk=True)
        return result, time.perf_counter() - start


def _answers_with(job: Job | None, outcome: Any) -> bool:
    """Whether ``job``'s result is ``outcome``'s artifact, byte for byte."""
    named = ((job.result_dict() or {}).get("artifact") or {}) if job is not None else {}
    return isinstance(outcome, Finish) and outcome.artifact is not None \
        and named.get("sha256") == outcome.artifact.sha256


def _lane_gate(s: HandlerServices, tenant: str) -> asyncio.Semaphore:
    gates = s.kiosk_lane_gates
    gate = gates.get(tenant)
    if gate is None:
        cfg = s.config
        gate = gates[tenant] = asyncio.Semaphore(cfg.kiosk.process_share(len(cfg.tenants)))
    return gate


@contextlib.asynccontextmanager
async def _waiting(gate: asyncio.Semaphore, wait_s: float) -> Any:
    """Hold ``gate``, waiting at most ``wait_s`` for it (then 503 busy)."""
    try:
        async with asyncio.timeout(max(0.0, wait_s)):
            await gate.acquire()
    except TimeoutError:
        raise Busy("the kiosk's processes are taken by this tenant's other requests",
                   headers={"Retry-After": "1"}) from None
    try:
        yield
    finally:
        gate.release()


def _flown(s: HandlerServices) -> Any:
    def done(task: asyncio.Task[Any]) -> None:
        s.kiosk_flights.discard(task)
        if not task.cancelled():
            task.exception()  # answered already, or past its answer: logged where raised

    return done


async def _once(data: bytes) -> Any:
    yield data


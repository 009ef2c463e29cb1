"""Pure decisions about jobs: identity, idempotency, retries, and what clients see.

Nothing here does I/O; the store and the worker pool call these with values.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from casesignd.core import audit
from casesignd.core.errors import INTERNAL, RETRIES_EXHAUSTED, CasesignError, ValidationError
from casesignd.core.fields import integer, rfc3339_time
from casesignd.core.hashing import sha256_hex
from casesignd.store.claims import PRIORITY_MAX, PRIORITY_MIN

# Engine states → the five states a client sees (contract: "The job resource").
CLIENT_STATE = {
    "queued": "queued",
    "retry_wait": "queued",
    "running": "processing",
    "succeeded": "ready",
    "failed": "failed",
    "canceled": "canceled",
}
TERMINAL = frozenset({"succeeded", "failed", "canceled"})
CLIENT_STATES = frozenset(CLIENT_STATE.values())

_CASE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_IDEM_KEY = re.compile(r"[\x20-\x7e]{1,255}")


def client_state(state: str) -> str:
    return CLIENT_STATE[state]


def engine_states(client: str) -> list[str]:
    """The engine states behind a client-visible state (for ``GET /v1/jobs?state=``)."""
    return [s for s, c in CLIENT_STATE.items() if c == client]


def check_case_id(value: Any, field: str = "case_id") -> str:
    """A case id: 1–128 characters of [A-Za-z0-9._:-]."""
    if not isinstance(value, str) or not _CASE_ID.fullmatch(value):
        raise ValidationError("case_id must be 1-128 characters of A-Z a-z 0-9 . _ : -",
                              code="invalid_case_id", field=field)
    return value


def check_idempotency_key(value: str | None) -> str | None:
    """The Idempotency-Key header: 1–255 printable ASCII characters, or absent."""
    if value is None:
        return None
    if not _IDEM_KEY.fullmatch(value):
        raise ValidationError("Idempotency-Key must be 1-255 printable ASCII characters",
                              code="invalid_idempotency_key", field="Idempotency-Key")
    return value


def fingerprint(kind: str, normalized: dict[str, Any]) -> str:
    """What makes two requests 'the same': the kind and the normalized input."""
    return sha256_hex(audit.canonical({"kind": kind, "input": normalized}))


def idempotency_key(header: str | None, kind: str, key_material: dict[str, Any]) -> str:
    """The stored key: the client's, or one derived from what would be signed, so that a
    blind retry without a key still cannot sign twice. The two never collide."""
    if header is not None:
        return "key:" + header
    return "derived:" + sha256_hex(audit.canonical({"kind": kind, "key": key_material}))


@dataclass(frozen=True)
class Schedule:
    """When and in what order a job asks to run: ``priority`` among its tenant's jobs
    (0 first) and ``not_before`` (Unix seconds; None: at once)."""

    priority: int = 0
    not_before: float | None = None

    def fingerprint(self) -> dict[str, Any]:
        """What the idempotency fingerprint adds for it: nothing for the defaults, so
        that a request that leaves them out and one that sends them are the same."""
        out: dict[str, Any] = {}
        if self.priority:
            out["priority"] = self.priority
        if self.not_before is not None:
            out["not_before"] = audit.rfc3339(self.not_before)
        return out


def schedule(body: dict[str, Any]) -> Schedule:
    """The job's ``priority`` and ``not_before``, taken out of ``body`` (the kinds never
    see them): ``invalid_field`` for an integer out of 0..9 or a time that is no RFC
    3339 date-time with an offset."""
    priority = body.pop("priority", None)
    not_before = body.pop("not_before", None)
    return Schedule(
        priority=0 if priority is None else integer(priority, "priority", PRIORITY_MIN,
                                                    PRIORITY_MAX),
        not_before=None if not_before is None else rfc3339_time(not_before, "not_before"))


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0
    category: str = ""
    code: str = ""
    counts: bool = True  # whether this failure uses up one of the job's attempts


def backoff_s(failures: int, base_s: float, cap_s: float, rand: float) -> float:
    """Capped exponential backoff with 'equal jitter': half the step is fixed, half is
    random, so delays grow with every failure yet never synchronize. ``rand`` ∈ [0, 1)."""
    step = min(cap_s, base_s * (2 ** max(0, failures - 1)))
    return step / 2 + rand * step / 2


def plan_retry(
    failures: int, error: BaseException, *, max_attempts: int, base_s: float, cap_s: float,
    rand: float | None = None,
) -> RetryDecision:
    """Decide what a failed attempt leads to. ``failures`` counts this failure too.

    Only errors marked retryable retry; anything unexpected is an internal failure
    and does not retry (a bug does not get better by repetition)."""
    if isinstance(error, CasesignError):
        code, retryable, category = error.code, error.retryable, error.category
    else:
        code, retryable, category = "internal_error", False, INTERNAL
    if not retryable:
        return RetryDecision(False, category=category, code=code)
    r = random.random() if rand is None else rand
    hint = getattr(error, "delay_s", None)
    if not getattr(error, "counts_as_attempt", True):
        # Waiting for a shared resource (temp space) is not a failure of the job: it
        # waits, jittered around the resource's hint, however long that takes.
        return RetryDecision(True, delay_s=backoff_s(1, hint or base_s, cap_s, r), code=code,
                             counts=False)
    if failures >= max_attempts:
        return RetryDecision(False, category=RETRIES_EXHAUSTED, code=code)
    delay = backoff_s(failures, base_s, cap_s, r)
    if hint:
        delay = min(cap_s, max(delay, hint))
    return RetryDecision(True, delay_s=delay, category="", code=code)


def timings(job: Any, now: float) -> dict[str, float]:
    """The three clocks: admission, time spent queued, time spent processing."""
    queue_wait = job.queue_wait_ms
    processing = job.processing_ms
    if job.state in ("queued", "retry_wait") and job.queued_since:
        queue_wait += max(0.0, now - job.queued_since) * 1000.0
    if job.state == "running" and job.claimed_at:
        processing += max(0.0, now - job.claimed_at) * 1000.0
    end = job.finished_at or now
    return {
        "admission_ms": round(job.admission_ms, 3),
        "queue_wait_ms": round(queue_wait, 3),
        "processing_ms": round(processing, 3),
        "total_ms": round(max(0.0, end - job.created_at) * 1000.0, 3),
    }


class Links(Protocol):
    """What makes an artifact's download link (casesignd.daemon.lifecycle.Services)."""

    def link(self, artifact_id: str, tenant: str) -> tuple[str, int]: ...


def waiting(job: Any) -> bool:
    """Whether ``job`` waits for a claim (client state ``queued``)."""
    return job.state in ("queued", "retry_wait")


def resource(services: Links, job: Any, now: float | None = None,
             paused: bool = False) -> dict[str, Any]:
    """The contract's job resource, as ``GET /v1/jobs/{id}`` answers it and a webhook
    delivery carries it: a ready job's download link is made now (pure but for it).
    ``paused``: a pause holds the claims of its kind or tenant (shown while it waits)."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "kind": job.kind,
        "case_id": job.case_id,
        "state": client_state(job.state),
        "attempts": job.attempt,
        "version": job.version,
        "priority": job.priority,
        "paused": paused and waiting(job),
        "created_at": audit.rfc3339(job.created_at),
        "updated_at": audit.rfc3339(job.updated_at),
        "timings": timings(job, now),
    }
    if job.not_before is not None and waiting(job):
        out["not_before"] = audit.rfc3339(job.not_before)
    if job.state == "succeeded":
        result = job.result_dict() or {}
        artifact = result.get("artifact")
        if artifact:
            out["result"] = {
                "artifact_id": artifact["artifact_id"], "sha256": artifact["sha256"],
                "size": artifact["size"], "media_type": artifact["media_type"],
            }
            if artifact.get("removed_at") is not None:
                # Retention or an erasure removed it: what it was, when it went, and
                # no link to something that answers 404.
                out["result"]["removed_at"] = audit.rfc3339(artifact["removed_at"])
            else:
                url, expires = services.link(artifact["artifact_id"], job.tenant)
                out["result"].update(download_url=url, expires_at=audit.rfc3339(expires))
        else:
            out["result"] = {"detail": result.get("detail", {})}
    if job.state == "failed":
        out["error"] = {"category": job.error_category, "code": job.error_code,
                        "correlation_id": job.correlation_id,
                        **(job.refusal() or {})}
    return out

"""One recorder of outcomes, for every attempt (:mod:`casesignd.engine.attempt`): the
worker pool's and the kiosk's alike.

An attempt that raised becomes a :class:`RetryLater` or a :class:`Fail` here
(:func:`casesignd.engine.jobs.plan_retry` decides); an attempt that ended, whichever way, is
counted and logged here, on one line with its phases, once its outcome is written.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from casesignd.config import Config
from casesignd.core.errors import CasesignError, TempBroken
from casesignd.core.logs import log_event
from casesignd.core.outcomes import Fail, Finish, Outcome, RetryLater
from casesignd.core.sealed import broken_seal
from casesignd.engine import jobs
from casesignd.observability.metrics import Metrics
from casesignd.observability.tracing import Tracing
from casesignd.store import Job

log = logging.getLogger("casesignd.engine.pool")

_REASON = re.compile(r"[a-z0-9_]{1,40}")


@dataclass(frozen=True)
class AttemptId:
    """Which attempt an outcome's log line is about."""

    job_id: str
    attempt: int
    kind: str
    correlation_id: str
    pool: str = "batch"  # or "kiosk"

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "attempt": self.attempt, "kind": self.kind,
                               "correlation_id": self.correlation_id}
        if self.pool != "batch":
            out["pool"] = self.pool
        return out


class Recorder:
    """Decides failures, and counts and logs every outcome once it is written.
    ``tracing``: the daemon's, when on (each attempt is then a span); None when off."""

    def __init__(self, config: Config, metrics: Metrics, tracing: Tracing | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.tracing = tracing

    def max_attempts(self, kind: str) -> int:
        retry = self.config.retry
        return retry.max_attempts.get(kind, retry.default_max_attempts)

    def failure(self, kind: str, failures: int, error: BaseException) -> RetryLater | Fail:
        """What an attempt that raised ``error`` ends in; ``failures`` counts this one."""
        retry = self.config.retry
        broken = broken_seal(error)
        if broken is not None:
            # A temp file that did not read back whole, however a library reported it
            # (a parser's "damaged PDF" over a chunk that failed): retried from the
            # source, never refused for the document's sake.
            error = TempBroken(f"a temporary file did not read back whole: {broken}")
        decision = jobs.plan_retry(failures, error, max_attempts=self.max_attempts(kind),
                                   base_s=retry.base_delay_s, cap_s=retry.max_delay_s)
        self.metrics.allow("code", decision.code)
        detail = error_detail(error)
        if decision.retry:
            return RetryLater(decision.code, decision.delay_s, detail, decision.counts)
        return Fail(decision.category, decision.code, detail, refusal(error))

    def recorded(self, who: AttemptId, outcome: Outcome, done: Job | None, *, started: float,
                 phases: dict[str, float], error: BaseException | None = None) -> None:
        """Count and log an outcome the store has written (``done``: the job after it,
        None when the lease had moved on and the outcome was dropped)."""
        fields = who.fields()
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        timing: dict[str, Any] = {"duration_ms": duration_ms, "phases_ms": phases_ms(phases)}
        if done is None:
            self.metrics.stale_result()
            log_event(log, "job.stale_result", level=logging.WARNING, **timing, **fields)
            return
        if isinstance(outcome, Finish):
            self.finished(done, "succeeded")
            log_event(log, "job.succeeded", **timing, **fields)
        elif isinstance(outcome, RetryLater):
            self.metrics.retry(who.kind, outcome.code)
            log_event(log, "job.retry_scheduled", level=logging.WARNING, code=outcome.code,
                      delay_ms=round(outcome.delay_s * 1000), error=_err(error), **timing,
                      **fields)
        else:
            internal = outcome.category == "internal"
            log_event(log, "job.failed", level=logging.ERROR if internal else logging.WARNING,
                      code=outcome.code, category=outcome.category, error=_err(error),
                      exc_info=error if internal else None, **timing, **fields)
            self.finished(done, "failed")

    def finished(self, job: Job, outcome: str) -> None:
        """Count a job that ended, with its three clocks."""
        self.metrics.job_finished(job.kind, outcome)
        t = jobs.timings(job, time.time())
        self.metrics.observe_clocks(job.kind, t["queue_wait_ms"] / 1000,
                                    t["processing_ms"] / 1000, t["total_ms"] / 1000)


def error_detail(error: BaseException) -> dict[str, Any]:
    """What the audit trail keeps of an error: its code, never personal data."""
    if isinstance(error, CasesignError):
        out: dict[str, Any] = {"code": error.code, "retryable": error.retryable}
        # A retry's reason (a source's "http_5xx", "timeout"...) and a refused
        # document's are fixed tokens, and what an operator reading the job's events
        # needs to see; of where, the page and object numbers (names may be a person's).
        reason = error.reason or error.detail.get("reason")
        if isinstance(reason, str) and _REASON.fullmatch(reason):
            out["reason"] = reason
        where = {k: v for k, v in error.where.items() if isinstance(v, int)}
        if where:
            out["where"] = where
        return out
    return {"code": "internal_error", "exception": type(error).__name__}


def refusal(error: BaseException) -> dict[str, Any] | None:
    """A refused document's reason, where and message, for the job resource (the
    tenant's own document: a field or an attachment is named), or None."""
    if not isinstance(error, CasesignError) or error.reason is None:
        return None
    out: dict[str, Any] = {"reason": error.reason, "message": error.message[:500]}
    if error.where:
        out["where"] = dict(error.where)
    return out


def phases_ms(phases: dict[str, float]) -> dict[str, float]:
    """An attempt's phase times for its outcome's log line, in milliseconds."""
    return {name: round(took * 1000, 3) for name, took in phases.items()}


def _err(error: BaseException | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {error}"

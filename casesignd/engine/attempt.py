"""One attempt at one job, whichever path runs it: the worker pool (a job it claimed
from the store) or the kiosk (a signature whose job is written only at its end).

An attempt is claimed; it times its phases (onto its outcome's log line and into the
metrics); it ends in an outcome, the kind's :class:`Finish` or, for an error, the
:class:`RetryLater` or :class:`Fail` the recorder decides; and it records that outcome
through the writer its path gave it. The pool's writer concludes the job's lease. The
kiosk's writes the job and its outcome in one commit, or, when the deadline passed and
the job had to be written as running beforehand, updates that job: the attempt never
assumes its job is in the store already. Once written, the outcome is counted and
logged by the :class:`~casesignd.engine.recorder.Recorder`, the same way for both.

With tracing on, the attempt is also a span under the trace stored with its job
(:meth:`casesignd.observability.tracing.Tracing.attempt`): its queue wait from the
store's clocks, a child per phase, its outcome and error code. Off, the recorder has
no tracer and the attempt makes none of this.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from casesignd.core.errors import CasesignError
from casesignd.core.logs import log_event
from casesignd.core.outcomes import Fail, Finish, Outcome, RetryLater
from casesignd.engine.recorder import AttemptId, Recorder
from casesignd.observability.tracing import AttemptSpans, tenant_hash
from casesignd.store import Job

# The attempt's lines go out under the pool's logger, as its outcome's line does
# (casesignd.engine.recorder): one name to follow an attempt by, whichever path ran it.
log = logging.getLogger("casesignd.engine.pool")

WriteOutcome = Callable[[Outcome], Awaitable["Job | None"]]
"""Writes an attempt's outcome to the store; the job after it, or None when the lease
had moved on and the store dropped the outcome."""


class JobAttempt:
    """One attempt at one job: its clock, its phases, its outcome and their recording.

    ``failures`` counts the failures of the job's series before this attempt (the
    retry plan counts this one on top); ``write`` records an outcome (see
    :data:`WriteOutcome`); ``job``: the job as claimed, whose trace and clocks its
    span continues, when there is a row already (the kiosk's comes at its end)."""

    def __init__(self, recorder: Recorder, who: AttemptId, write: WriteOutcome,
                 failures: int = 0, job: Job | None = None) -> None:
        self.recorder = recorder
        self.who = who
        self.failures = failures
        self.phases: dict[str, float] = {}
        self.error: BaseException | None = None
        self.spans: AttemptSpans | None = None  # tracing on, once claimed
        self._job = job
        self._write = write
        self._started = time.perf_counter()

    @classmethod
    def of_claimed(cls, recorder: Recorder, job: Job, write: WriteOutcome,
                   pool: str = "batch") -> JobAttempt:
        """The attempt at ``job`` as the store handed it over with its claim."""
        return cls(recorder, AttemptId(job.job_id, job.attempt, job.kind, job.correlation_id,
                                       pool), write, failures=job.failures, job=job)

    def claimed(self, traced: Traced | None = None) -> None:
        """The attempt holds its job now (its lease, or the kiosk's signing lock).
        ``traced``: what its span continues when the attempt has no job row yet."""
        if log.isEnabledFor(logging.DEBUG):  # not even its fields otherwise
            log_event(log, "job.claimed", level=logging.DEBUG, **self.who.fields())
        if self.recorder.tracing is not None:
            self._trace(traced or Traced.of(self._job))

    def _trace(self, traced: Traced | None) -> None:
        assert self.recorder.tracing is not None
        if traced is None:
            return
        who = self.who
        self.spans = self.recorder.tracing.attempt(
            traced.traceparent, kind=who.kind, due_at=traced.due_at,
            claimed_at=traced.claimed_at, attributes={
                "casesignd.job_id": who.job_id, "casesignd.kind": who.kind,
                "casesignd.attempt": who.attempt, "casesignd.pool": who.pool,
                "casesignd.correlation_id": who.correlation_id,
                "casesignd.tenant_hash": tenant_hash(traced.tenant),
                "casesignd.declared_bytes": traced.declared_bytes})

    @contextlib.asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """Time one phase of the attempt (fetch, validate, scan, sign, ...)."""
        start = time.perf_counter()
        try:
            if self.spans is None:
                yield
            else:
                with self.spans.phase(name):
                    yield
        finally:
            self._took(name, time.perf_counter() - start)

    def record_phase(self, name: str, took: float) -> None:
        """One phase that took ``took`` seconds, timed elsewhere (in a worker process).
        Phases go on the outcome's one log line (``phases_ms``), not on lines of their own."""
        self._took(name, took)
        if self.spans is not None:
            self.spans.timed(name, took)

    def _took(self, name: str, took: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + took
        self.recorder.metrics.observe_phase(self.who.kind, name, took)

    def failed(self, error: BaseException) -> RetryLater | Fail:
        """The outcome of this attempt ending in ``error``: a retry later, or a failure."""
        self.error = error
        return self.recorder.failure(self.who.kind, self.failures + 1, error)

    async def record(self, outcome: Outcome) -> Job | None:
        """Write ``outcome``, then count and log it; the job after it (None: dropped,
        the lease had moved on). A failed write raises: see :meth:`not_recorded`."""
        done = await self._write(outcome)
        self.recorder.recorded(self.who, outcome, done, started=self._started,
                               phases=self.phases, error=self.error)
        if self.spans is not None:
            self._end_spans(outcome, done)
        return done

    def _end_spans(self, outcome: Outcome, done: Job | None) -> None:
        assert self.spans is not None
        if done is None:
            self.spans.end("stale")
        elif isinstance(outcome, Finish):
            artifact = outcome.artifact
            self.spans.end("succeeded", result_bytes=artifact.size if artifact is not None else 0)
        elif isinstance(outcome, RetryLater):
            self.spans.end("retry", outcome.code)
        else:
            self.spans.end("failed", outcome.code, category=outcome.category)
        self.spans = None

    def stopped(self, why: str) -> None:
        """The attempt ended without an outcome to record (``why``: released at a
        stop, its lease lost, its request canceled): its span ends saying so."""
        if self.spans is not None:
            self.spans.end(why)
            self.spans = None

    def not_recorded(self, error: BaseException) -> None:
        """Log that the outcome could not be written (``error``: why)."""
        code = error.code if isinstance(error, CasesignError) else "internal_error"
        log_event(log, "job.outcome_not_recorded", level=logging.ERROR, code=code,
                  **self.who.fields())
        if self.spans is not None:
            self.spans.end("not_recorded", code)
            self.spans = None


@dataclass(frozen=True)
class Traced:
    """What an attempt's span continues: the trace stored with its job, its tenant
    and size, and the store's clocks of when it was due and when it was claimed."""

    traceparent: str | None
    tenant: str
    declared_bytes: int
    due_at: float
    claimed_at: float

    @classmethod
    def of(cls, job: Job | None) -> Traced | None:
        """Of a claimed job's row: due when it was last queued (its admission, a
        retry's time, a release), claimed at its claim."""
        if job is None or job.claimed_at is None:
            return None
        return cls(job.traceparent, job.tenant, job.declared_bytes, job.next_attempt_at,
                   job.claimed_at)

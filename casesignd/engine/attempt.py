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
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from casesignd.core.errors import CasesignError
from casesignd.core.logs import log_event
from casesignd.core.outcomes import Fail, Outcome, RetryLater
from casesignd.engine.recorder import AttemptId, Recorder
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
    :data:`WriteOutcome`)."""

    def __init__(self, recorder: Recorder, who: AttemptId, write: WriteOutcome,
                 failures: int = 0) -> None:
        self.recorder = recorder
        self.who = who
        self.failures = failures
        self.phases: dict[str, float] = {}
        self.error: BaseException | None = None
        self._write = write
        self._started = time.perf_counter()

    @classmethod
    def of_claimed(cls, recorder: Recorder, job: Job, write: WriteOutcome,
                   pool: str = "batch") -> JobAttempt:
        """The attempt at ``job`` as the store handed it over with its claim."""
        return cls(recorder, AttemptId(job.job_id, job.attempt, job.kind, job.correlation_id,
                                       pool), write, failures=job.failures)

    def claimed(self) -> None:
        """The attempt holds its job now (its lease, or the kiosk's signing lock)."""
        if log.isEnabledFor(logging.DEBUG):  # not even its fields otherwise
            log_event(log, "job.claimed", level=logging.DEBUG, **self.who.fields())

    @contextlib.asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """Time one phase of the attempt (fetch, validate, scan, sign, ...)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record_phase(name, time.perf_counter() - start)

    def record_phase(self, name: str, took: float) -> None:
        """One phase that took ``took`` seconds, timed elsewhere (in a worker process).
        Phases go on the outcome's one log line (``phases_ms``), not on lines of their own."""
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
        return done

    def not_recorded(self, error: BaseException) -> None:
        """Log that the outcome could not be written (``error``: why)."""
        code = error.code if isinstance(error, CasesignError) else "internal_error"
        log_event(log, "job.outcome_not_recorded", level=logging.ERROR, code=code,
                  **self.who.fields())

"""Acknowledgements of new jobs paced to the rate the queue drains.

A client that submits faster than the workers sign builds a standing queue, and a
client that polls pays for it: every job is polled once per poll interval while it
waits, and each poll costs the daemon (and the client) as much as a tenth of the job.
So once more than ``workers.ack_pacing_depth`` acknowledged jobs are queued, the
acknowledgement of a new job, already durable, waits until the workers claim a
job (one claim lets one waiting acknowledgement go, oldest first) or for at most
``workers.ack_pacing_max_ms``. A client that waits for its acknowledgement then
submits at the rate jobs are signed, the queue stays near the depth, and its jobs
are ready by the time it first polls. The job's own clocks are not touched: its
admission ends at the commit, before any wait.

No acknowledgement waits while the workers are not claiming (every slot taken by long
jobs, the pool stopped): waiting then would only slow the client, not shorten any queue.
The count of queued jobs is this daemon's own (its admissions and claims), corrected
from the store's count whenever the gauges are refreshed, so that jobs other daemons
on a shared store queued and claimed count too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable


def pacing_depth(configured: int, concurrency: int) -> int:
    """The depth past which acknowledgements wait: the configured one, but at
    least two claims' worth of work for every slot (0 turns pacing off)."""
    return max(configured, 2 * concurrency) if configured > 0 else 0


class AckPacer:
    """Keeps acknowledgements waiting while the queue stands over ``depth`` (0: never)."""

    def __init__(self, depth: int, max_wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.depth = depth
        self.max_wait_s = max_wait_s
        self._clock = clock
        self.queued = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._last_claim = float("-inf")

    @property
    def waiting(self) -> int:
        """Acknowledgements waiting now."""
        return len(self._waiting)

    def observed(self, queued: int) -> None:
        """The store's count of queued jobs (waiting acknowledgements' jobs included)."""
        self.queued = queued
        self._release()

    def claimed(self, n: int) -> None:
        """The workers here claimed ``n`` queued jobs."""
        if n > 0:
            self.queued = max(0, self.queued - n)
            self._last_claim = self._clock()
            self._release()

    def should_wait(self) -> bool:
        """Whether the acknowledgement of a job just queued waits: the acknowledged
        jobs queued would stand over the depth, and the workers are claiming."""
        return (self.depth > 0 and self.queued - len(self._waiting) > self.depth
                and self._clock() - self._last_claim < self.max_wait_s)

    async def admitted(self) -> float:
        """A job was just queued here: returns when its acknowledgement may go, with
        the seconds it waited."""
        self.queued += 1
        if not self.should_wait():
            return 0.0
        started = self._clock()
        gate = asyncio.get_running_loop().create_future()
        self._waiting.append(gate)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate, self.max_wait_s)
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(gate)  # timed out or cancelled: still in line
        return self._clock() - started

    def release_all(self) -> None:
        """Let every waiting acknowledgement go (the daemon is stopping)."""
        while self._waiting:
            self._open(self._waiting.popleft())

    def _release(self) -> None:
        while self._waiting and self.queued - len(self._waiting) < self.depth:
            self._open(self._waiting.popleft())

    @staticmethod
    def _open(gate: asyncio.Future[None]) -> None:
        if not gate.done():
            gate.set_result(None)

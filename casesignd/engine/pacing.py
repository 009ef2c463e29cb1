"""Acknowledgements of new jobs paced to the rate the queue drains.

A client that submits faster than the workers sign builds a standing queue, and a
client that polls pays for it: every job is polled once per poll interval while it
waits, and each poll costs the daemon (and the client) as much as a tenth of the job.
So once more than ``workers.ack_pacing_depth`` acknowledged jobs are queued, the
acknowledgement of a new job, already durable, is held until the workers claim a
job (one claim lets one held acknowledgement go, oldest first) or for at most
``workers.ack_pacing_max_ms``. A client that waits for its acknowledgement then
submits at the rate jobs are signed, the queue stays near the depth, and its jobs
are ready by the time it first polls. The job's own clocks are not touched: its
admission ends at the commit, before any hold.

Nothing is held while the workers are not claiming (every slot taken by long jobs,
the pool stopped): holding then would only slow the client, not shorten any queue.
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


def held_depth(configured: int, concurrency: int) -> int:
    """The depth past which acknowledgements are held: the configured one, but at
    least two claims' worth of work for every slot (0 turns pacing off)."""
    return max(configured, 2 * concurrency) if configured > 0 else 0


class AckPacer:
    """Holds acknowledgements while the queue stands over ``depth`` (0: never)."""

    def __init__(self, depth: int, max_hold_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.depth = depth
        self.max_hold_s = max_hold_s
        self._clock = clock
        self.queued = 0
        self._held: collections.deque[asyncio.Future[None]] = collections.deque()
        self._last_claim = float("-inf")

    @property
    def holding(self) -> int:
        """Acknowledgements held now."""
        return len(self._held)

    def observed(self, queued: int) -> None:
        """The store's count of queued jobs (held acknowledgements' jobs included)."""
        self.queued = queued
        self._release()

    def claimed(self, n: int) -> None:
        """The workers here claimed ``n`` queued jobs."""
        if n > 0:
            self.queued = max(0, self.queued - n)
            self._last_claim = self._clock()
            self._release()

    def should_hold(self) -> bool:
        """Whether the acknowledgement of a job just queued waits: the acknowledged
        jobs queued would stand over the depth, and the workers are claiming."""
        return (self.depth > 0 and self.queued - len(self._held) > self.depth
                and self._clock() - self._last_claim < self.max_hold_s)

    async def admitted(self) -> float:
        """A job was just queued here: returns when its acknowledgement may go, with
        the seconds it was held."""
        self.queued += 1
        if not self.should_hold():
            return 0.0
        started = self._clock()
        gate = asyncio.get_running_loop().create_future()
        self._held.append(gate)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate, self.max_hold_s)
        finally:
            with contextlib.suppress(ValueError):
                self._held.remove(gate)  # timed out or cancelled: still in line
        return self._clock() - started

    def release_all(self) -> None:
        """Let every held acknowledgement go (the daemon is stopping)."""
        while self._held:
            self._open(self._held.popleft())

    def _release(self) -> None:
        while self._held and self.queued - len(self._held) < self.depth:
            self._open(self._held.popleft())

    @staticmethod
    def _open(gate: asyncio.Future[None]) -> None:
        if not gate.done():
            gate.set_result(None)

"""The worker pool: claims jobs, runs them, and records every outcome.

The pool is bounded three ways: jobs at once (``workers.concurrency``), bytes in
flight (a job's declared size is reserved before it is claimed, inside the claim
statement), and signing-key access (key slots, held only around the key operation).
Leases are renewed by a heartbeat while the work runs; leases that expire are
reclaimed periodically, and at start-up the leases of this daemon's node name are
reclaimed at once, because the store's lock (SQLite's file, PostgreSQL's lock on the
name) proves that no live daemon holds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from casesignd.core.errors import CasesignError, TransientJobError
from casesignd.core.logs import log_event
from casesignd.core.outcomes import Finish, Outcome
from casesignd.engine.attempt import JobAttempt
from casesignd.engine.kinds import JobKind, JobServices
from casesignd.engine.pacing import AckPacer, pacing_depth
from casesignd.engine.recorder import Recorder
from casesignd.files.temp import Area, TempManager
from casesignd.store import Job, Lease, Store

log = logging.getLogger("casesignd.engine.pool")
T = TypeVar("T")

class LeaseLost(CasesignError):
    """This attempt no longer holds its lease; its result must not be published."""

    code = "lease_lost"


@dataclass
class _Running:
    job: Job
    task: asyncio.Task[Job | None]
    lost: bool = False
    kiosk: bool = False  # run by the kiosk path: outside the batch bounds
    deadline: float | None = None  # the kiosk request's answer-by time (Unix seconds)
    started: float = field(default_factory=time.monotonic)
    # The signature recorded for the job's signature key, read with its claim.
    signature: dict[str, Any] | None = None
    # Whether it still takes one of the batch slots (workers.concurrency).
    in_slot: bool = False


class Slots(Protocol):
    """The key slots an attempt holds around a key's use: a batch one, or a kiosk one
    waited for at most ``timeout_s``."""

    def batch(self) -> contextlib.AbstractAsyncContextManager[None]: ...
    def kiosk(self, timeout_s: float) -> contextlib.AbstractAsyncContextManager[None]: ...


class PoolServices(JobServices, Protocol):
    """What the pool uses of the daemon's services (casesignd.daemon.lifecycle.Services), besides
    what it hands to the jobs it runs."""

    temp: TempManager
    node: str  # this daemon's name among those on one store (serve --node)

    @property
    def key_slots(self) -> Slots: ...

    async def run_cpu(self, fn: Callable[..., Any], *args: Any, kiosk: bool = False) -> Any: ...
    async def refresh_state(self) -> None: ...


class JobCtx:
    """The :class:`casesignd.engine.kinds.JobContext` the pool hands to a running job."""

    def __init__(self, pool: Pool, job: Job, running: _Running, attempt: JobAttempt) -> None:
        self.job_id = job.job_id
        self.tenant = job.tenant
        self.kind = job.kind
        self.attempt = job.attempt
        self.series_failures = job.failures
        self.case_id = job.case_id
        self.version = job.version
        self.input = job.input_dict()
        self.correlation_id = job.correlation_id
        self.job = job
        self.config = pool.services.config
        self.services = pool.services
        # The signature recorded for this job's signature key when it was claimed.
        self.recorded_signature = running.signature
        self.area: Area | None = None  # when the kind needs one
        # What the attempt keeps until its outcome is recorded (a signature key's lock).
        self.until_recorded = contextlib.AsyncExitStack()
        self._pool = pool
        self._job_attempt = attempt
        self._running = running

    @property
    def workdir(self) -> Path:
        """The attempt's private directory (only for a kind that asked for one)."""
        if self.area is None:
            raise RuntimeError("this attempt runs without a temp area")
        return Path(self.area.path)

    @property
    def kiosk(self) -> bool:
        return self._running.kiosk

    def phase(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        # Timed by the attempt, onto its outcome's one log line (phases_ms).
        return self._job_attempt.phase(name)

    def record_phase(self, name: str, took: float) -> None:
        self._job_attempt.record_phase(name, took)

    async def cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.services.run_cpu(fn, *args, kiosk=self._running.kiosk)

    def key_slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        if self._running.kiosk:
            left = (self._running.deadline or time.time()) - time.time()
            return self.services.key_slots.kiosk(left)
        return self.services.key_slots.batch()

    async def check_lease(self) -> None:
        if self._running.lost or self._pool.stopping_hard:
            raise LeaseLost("the lease of this attempt is no longer held")

    async def keep_until_recorded(self, cm: contextlib.AbstractAsyncContextManager[T]) -> T:
        return await self.until_recorded.enter_async_context(cm)


class Pool:
    """Runs jobs of the registered kinds with the configured bounds."""

    # Jobs claimed in one transaction at most: a claim is one writer round trip.
    CLAIM_BATCH = 8

    def __init__(self, services: PoolServices, kinds: dict[str, JobKind], store: Store,
                 recorder: Recorder) -> None:
        self.services = services
        self.cfg = services.config
        self.kinds = kinds
        self.store = store
        self.recorder = recorder
        # On every lease and every event a worker writes: which daemon, which process.
        self.owner = f"{services.node}:{os.getpid()}:{secrets.token_hex(4)}"
        self.running: dict[str, _Running] = {}
        self.batch_running = 0
        self.inflight_bytes = 0
        self.stopping = False
        self.stopping_hard = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.last_progress = time.monotonic()
        # Attempts finished plus leases renewed: what the systemd watchdog takes as
        # progress (a long job renewing its lease is progress; a stuck pool is not).
        self.progress = 0
        self.started = False
        # New jobs' acknowledgements wait while the queue stands (casesignd/engine/pacing.py).
        self.pacer = AckPacer(pacing_depth(self.cfg.workers.ack_pacing_depth,
                                           self.cfg.workers.concurrency),
                              self.cfg.workers.ack_pacing_max_ms / 1000.0)

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        reclaimed = await self.store.reclaim_expired(
            max_lost=self.cfg.retry.max_lost_leases, at_start_of=self.services.node)
        if reclaimed:
            self.services.metrics.lease_reclaimed(len(reclaimed))
            log_event(log, "pool.reclaimed_at_start", count=len(reclaimed))
        for name, coro in (("dispatch", self._dispatch()), ("heartbeat", self._heartbeat()),
                           ("maintain", self._maintain())):
            self._tasks.append(asyncio.create_task(coro, name=f"casesignd-{name}"))
        self.store.on_announce(self.wake)
        self.started = True

    async def stop(self, grace_s: float) -> None:
        """Stop claiming; let running jobs finish within ``grace_s``; then cancel them,
        which releases their leases so that a restart resumes them at once."""
        self.stopping = True
        self._wake.set()
        self.pacer.release_all()
        tasks = [r.task for r in self.running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        self.stopping_hard = True
        for r in list(self.running.values()):
            r.task.cancel()
        left = [r.task for r in self.running.values()]
        if left:
            await asyncio.wait(left, timeout=10)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.started = False

    @property
    def busy(self) -> int:
        """Attempts at work: the batch slots taken, and the kiosk's attempts (an
        attempt whose outcome is only being recorded has given its slot back)."""
        return self.batch_running + sum(1 for r in self.running.values() if r.kiosk)

    def wake(self) -> None:
        """New work may be there (an admission, a freed slot)."""
        self._wake.set()

    def queued(self) -> None:
        """Jobs were queued here: this pool claims them, and the other daemons on the
        store hear of it (``Store.announce``)."""
        self._wake.set()
        self.store.announce()

    def running_limits(self) -> dict[str, int]:
        """Each tenant's jobs running at once, of those limited ([tenants.limits]
        max_running): read at each claim, so a SIGHUP changes them at once."""
        return {t.name: t.limits.max_running for t in self.cfg.tenants
                if t.limits.max_running > 0}

    # --- the loops ---------------------------------------------------------------

    async def _dispatch(self) -> None:
        poll_s = self.cfg.workers.poll_interval_ms / 1000.0
        kinds = sorted(self.kinds)
        while not self.stopping:
            # Cleared before the claim, not after it: a wake-up that lands while an
            # empty claim is under way is kept, and the loop claims again at once.
            self._wake.clear()
            free = self.cfg.workers.concurrency - self.batch_running
            if free > 0:
                want = min(free, self.CLAIM_BATCH)
                budget = self.cfg.workers.max_inflight_bytes - self.inflight_bytes
                try:
                    claimed = await self.store.claim_batch(
                        self.owner, self.cfg.workers.lease_s, budget, kinds, want,
                        running_limits=self.running_limits())
                except CasesignError as e:
                    log_event(log, "pool.claim_failed", level=logging.WARNING, code=e.code)
                    await asyncio.sleep(poll_s)
                    continue
                for c in claimed:
                    self._start_job(c.job, signature=c.signature)
                self.pacer.claimed(len(claimed))
                if len(claimed) == want:
                    continue  # there may be more
            # Jittered, so that idle daemons on one store do not claim in step.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), poll_s * random.uniform(0.75, 1.25))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.workers.heartbeat_s)
            held = [r.job.lease for r in self.running.values() if not r.lost]
            try:
                lost = await self.store.renew(held, self.cfg.workers.lease_s)
            except CasesignError:
                continue  # the lease may still be valid; the next beat tries again
            self.progress += len(held) - len(lost)
            for lease in lost:
                # Counted where it was reclaimed; here the attempt only stops.
                r = self.running.get(lease.job_id)
                if r is not None and r.job.attempt == lease.attempt:
                    r.lost = True
                    log_event(log, "job.lease_lost", level=logging.WARNING, job_id=lease.job_id,
                              attempt=lease.attempt)
                    r.task.cancel()

    async def _maintain(self) -> None:
        last_reclaim = 0.0
        while True:
            await asyncio.sleep(min(0.25, self.cfg.workers.reclaim_interval_s))
            try:
                if await self.store.promote_due():
                    self.queued()
                now = time.monotonic()
                if now - last_reclaim >= self.cfg.workers.reclaim_interval_s:
                    last_reclaim = now
                    mine = {r.job.job_id for r in self.running.values()}
                    reclaimed = await self.store.reclaim_expired(max_lost=self.cfg.retry.max_lost_leases)
                    if reclaimed:
                        self.services.metrics.lease_expired(len(reclaimed))
                        self.services.metrics.lease_reclaimed(len(reclaimed))
                        for job in reclaimed:
                            r = self.running.get(job.job_id)
                            if job.job_id in mine and r is not None and not r.lost:
                                # Our own attempt outlived its lease (a stalled heartbeat):
                                # it stops, and the job runs again under a new lease.
                                r.lost = True
                                r.task.cancel()
                            if job.state == "failed":
                                self.recorder.finished(job, "failed")
                        self.queued()
                await self.services.refresh_state()
            except CasesignError as e:
                log_event(log, "pool.maintenance_failed", level=logging.WARNING, code=e.code)

    # --- one job -------------------------------------------------------------------

    def _start_job(self, job: Job, kiosk: bool = False, deadline: float | None = None,
                   signature: dict[str, Any] | None = None) -> asyncio.Task[Job | None]:
        holder = _Running(job=job, task=None, kiosk=kiosk, deadline=deadline,  # type: ignore[arg-type]
                          signature=signature)
        if not kiosk:
            self.inflight_bytes += job.declared_bytes
            self.batch_running += 1
            holder.in_slot = True
        holder.task = asyncio.create_task(self._run(job, holder), name=f"job-{job.job_id}")
        self.running[job.job_id] = holder
        return holder.task

    def run_kiosk(self, job: Job, deadline: float) -> asyncio.Task[Job | None]:
        """Run a job the kiosk path claimed, with the kiosk's CPU process and key slots.
        The task records the outcome like any other; it resolves to the final job row."""
        return self._start_job(job, kiosk=True, deadline=deadline)

    async def _run(self, job: Job, holder: _Running) -> Job | None:
        kind = self.kinds[job.kind]
        lease = job.lease
        attempt = JobAttempt.of_claimed(self.recorder, job, partial(self.store.conclude, lease),
                                        "kiosk" if holder.kiosk else "batch")
        attempt.claimed()
        ctx = JobCtx(self, job, holder, attempt)
        try:
            try:
                async with asyncio.timeout(self.cfg.workers.max_run_s):
                    outcome: Outcome = await self._attempt(kind, job, ctx)
            except asyncio.CancelledError:
                if holder.lost:
                    # The lease moved on: the job belongs to someone else now.
                    attempt.stopped("lease_lost")
                    await self._record_stale(lease)
                    return None
                if self.stopping_hard:
                    attempt.stopped("released")
                    await self._shield(self.store.release(lease))
                    log_event(log, "job.released", **attempt.who.fields())
                    return None
                raise
            except TimeoutError:
                outcome = attempt.failed(TransientJobError(
                    "the attempt ran longer than workers.max_run_s", code="attempt_timeout"))
            except Exception as e:  # noqa: BLE001 - every failure is decided by plan_retry
                if holder.lost or isinstance(e, LeaseLost):
                    attempt.stopped("lease_lost")
                    await self._record_stale(lease)
                    return None
                outcome = attempt.failed(e)
            # The work is done: its slot goes to the next claim now, which then rides
            # in the same transaction as this outcome (queued after it) instead of
            # waiting for it to commit first.
            self._free_slot(holder)
            return await attempt.record(outcome)
        except CasesignError as e:
            # The store itself failed while recording an outcome: the lease expires and
            # the job is reclaimed; nothing acknowledged is lost.
            attempt.not_recorded(e)
            return None
        finally:
            if not holder.kiosk:
                self.inflight_bytes -= job.declared_bytes
            self._free_slot(holder)
            # A newer attempt of the same job may already run (this one lost its lease):
            # only this attempt's own entry goes.
            if self.running.get(job.job_id) is holder:
                del self.running[job.job_id]
            self.last_progress = time.monotonic()
            self.progress += 1
            self.wake()
            # Let go of what the attempt kept only now that its outcome is recorded.
            await asyncio.shield(ctx.until_recorded.aclose())

    def _free_slot(self, holder: _Running) -> None:
        """Give back the batch slot ``holder`` takes (once), and let the dispatcher
        claim into it. Its bytes stay counted until its outcome is recorded."""
        if holder.in_slot:
            holder.in_slot = False
            self.batch_running -= 1
            self.wake()

    async def _attempt(self, kind: JobKind, job: Job, ctx: JobCtx) -> Finish:
        """The kind's run, in a temp area when it needs one; checked against the lease."""
        if kind.needs_area(ctx.input, self.cfg):
            async with self.services.temp.attempt(job.job_id, job.attempt,
                                                  kind_temp_bytes(job)) as area:
                ctx.area = area
                outcome = await kind.run(ctx)
                await ctx.check_lease()
                return outcome
        outcome = await kind.run(ctx)
        await ctx.check_lease()
        return outcome

    async def _shield(self, coro: Any) -> Any:
        with contextlib.suppress(CasesignError):
            return await asyncio.shield(coro)

    async def _record_stale(self, lease: Lease) -> None:
        # A fenced no-op write: the store records the attempt as lost.
        await self._shield(self.store.conclude(lease, Finish(detail={"stale": True})))
        self.services.metrics.stale_result()


def kind_temp_bytes(job: Job) -> int:
    """Temp bytes an attempt reserves: its inputs and its output, plus headroom."""
    return 2 * job.declared_bytes + 1024 * 1024

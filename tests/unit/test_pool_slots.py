"""The batch slots of the worker pool (workers.concurrency): an attempt takes one for
its work and gives it back as soon as its outcome goes to the store, so that the next
claim rides with that outcome instead of waiting for it to commit first."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from casesignd.config import loads
from casesignd.core import audit
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Finish, Outcome
from casesignd.engine import jobs
from casesignd.engine.pool import Pool
from casesignd.engine.recorder import Recorder
from casesignd.observability.metrics import Metrics
from casesignd.store import Lease, NewJob
from casesignd.store.memory import MemoryStore


class Quick:
    """A kind that is done at once, in no temp area; it notes how many of its attempts
    were at work together."""

    name = "test"

    def __init__(self) -> None:
        self.at_once = 0
        self.most_at_once = 0

    def needs_area(self, input: dict[str, Any], config: Any) -> bool:
        return False

    async def run(self, ctx: Any) -> Finish:
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        await asyncio.sleep(0)
        self.at_once -= 1
        return Finish(detail={"attempt": ctx.attempt})


class HeldConclude(MemoryStore):
    """A store whose outcomes are written only when the test lets them through, as a
    commit that has not landed yet."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = 0

    async def conclude(self, lease: Lease, outcome: Outcome) -> Any:
        self.waiting += 1
        await self.gate.wait()
        return await super().conclude(lease, outcome)


class Services:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.metrics = Metrics(strict=False)
        self.node = "n1"
        self.temp = None

    async def run_cpu(self, fn: Any, *args: Any, kiosk: bool = False) -> Any:
        return fn(*args)

    async def refresh_state(self) -> None:
        pass


def new_job(i: int) -> NewJob:
    body = {"i": i}
    return NewJob(tenant="t1", kind="test", case_id="C-1", idem_key=f"key:{i}",
                  fingerprint=jobs.fingerprint("test", body), input=audit.canonical(body).decode(),
                  input_digest=sha256_hex(audit.canonical(body)), version="v1",
                  declared_bytes=100, created_at=time.time(), correlation_id="corr")


async def until(check: Any, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.005)


async def test_a_slot_is_free_once_the_outcome_goes_to_the_store():
    config = loads('[workers]\nconcurrency = 1\npoll_interval_ms = 20\n')
    store = HeldConclude()
    await store.open()
    services = Services(config)
    kind = Quick()
    pool = Pool(services, {"test": kind}, store, Recorder(config, services.metrics))  # type: ignore[arg-type]
    for i in range(3):
        await store.admit(new_job(i), actor="api:t1", max_queue_depth=10)
    await pool.start()
    try:
        # With one slot, all three attempts run while no outcome has been written:
        # each gave its slot back when it handed its outcome over.
        await until(lambda: store.waiting == 3)
        assert kind.most_at_once == 1
        assert pool.batch_running == 0 and pool.busy == 0
        # Their bytes stay counted until their outcomes are written.
        assert pool.inflight_bytes == 300 and len(pool.running) == 3
        store.gate.set()
        await until(lambda: not pool.running)
        assert pool.inflight_bytes == 0
        states = [(await store.get_job("t1", j.job_id)).state for j in store._jobs.values()]
        assert states == ["succeeded"] * 3
    finally:
        store.gate.set()
        await pool.stop(grace_s=5)
        await store.close()


async def test_the_slot_is_given_back_once_when_an_attempt_is_cancelled():
    config = loads('[workers]\nconcurrency = 2\npoll_interval_ms = 20\n')
    store = HeldConclude()
    await store.open()
    services = Services(config)
    pool = Pool(services, {"test": Quick()}, store, Recorder(config, services.metrics))  # type: ignore[arg-type]
    await store.admit(new_job(0), actor="api:t1", max_queue_depth=10)
    await pool.start()
    try:
        await until(lambda: store.waiting == 1)
        assert pool.batch_running == 0
    finally:
        # Stopping cancels the attempt waiting on its outcome: its slot is not
        # given back a second time.
        await pool.stop(grace_s=0.05)
        assert pool.batch_running == 0 and pool.inflight_bytes == 0
        await store.close()

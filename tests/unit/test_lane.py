"""The kiosk's CPU lane: worker processes called straight from the event loop."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import weakref
from multiprocessing import get_context

import pytest

from casesignd.core.errors import MalformedPdf
from casesignd.engine.lanes import Lane, WorkerLost


def add(a: int, b: int) -> int:
    return a + b


def slow_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def refuse(message: str) -> None:
    raise MalformedPdf(message, detail={"at": 3})


def die() -> None:
    os._exit(3)


_LEFT: list[weakref.ref[object]] = []


class _Node:
    pass


def leave_cycles(n: int) -> tuple[bool, int]:
    """Leaves ``n`` reference cycles as garbage; says whether the collector runs on its
    own in the process and how many of the last call's cycles are still alive."""
    alive = sum(ref() is not None for ref in _LEFT)
    _LEFT.clear()
    for _ in range(n):
        node = _Node()
        node.self = node  # type: ignore[attr-defined]
        _LEFT.append(weakref.ref(node))
    return gc.isenabled(), alive


_KEPT: list[object] = []


def keep_a_cycle(keep: bool) -> bool:
    """With ``keep``, a cycle that outlives the call (promoted past the youngest
    generation by the next collection); without, the one kept before is let go. Says
    whether the last cycle let go is still alive."""
    if keep:
        node = _Node()
        node.self = node  # type: ignore[attr-defined]
        _KEPT.append(node)
        _LEFT.clear()
        _LEFT.append(weakref.ref(node))
    else:
        _KEPT.clear()
    return bool(_LEFT) and _LEFT[0]() is not None


def sleep_then(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value


@pytest.fixture
def lane():
    lane = Lane(2, get_context("forkserver"))
    yield lane
    lane.close()


def run(coro):
    return asyncio.run(coro)


def test_calls_return_and_use_every_process(lane):
    async def go():
        results = await asyncio.gather(*(lane.run(add, i, 1, timeout_s=30) for i in range(20)))
        pids = await asyncio.gather(*(lane.run(slow_pid, 0.3, timeout_s=30) for _ in range(2)))
        return results, pids

    results, pids = run(go())
    assert results == [i + 1 for i in range(20)]
    assert len(set(pids)) == 2 and os.getpid() not in pids


def test_an_exception_comes_back_with_its_type_and_detail(lane):
    async def go():
        with pytest.raises(MalformedPdf) as e:
            await lane.run(refuse, "bad xref", timeout_s=30)
        assert e.value.detail == {"at": 3} and e.value.code == "malformed_pdf"
        return await lane.run(add, 2, 2, timeout_s=30)

    assert run(go()) == 4


def test_a_worker_that_dies_fails_its_call_and_is_replaced(lane):
    async def go():
        with pytest.raises(WorkerLost) as e:
            await lane.run(die, timeout_s=30)
        assert e.value.retryable
        return await asyncio.gather(*(lane.run(add, 1, i, timeout_s=30) for i in range(4)))

    assert run(go()) == [1, 2, 3, 4]


def test_a_call_past_its_limit_is_stopped_and_its_process_replaced(lane):
    async def go():
        with pytest.raises(WorkerLost) as e:
            await lane.run(sleep_then, 1, 600, timeout_s=0.5)
        assert e.value.detail == {"reason": "timeout"}
        return await lane.run(add, 5, 5, timeout_s=30)

    assert run(go()) == 10


def test_a_cancelled_call_never_hands_its_answer_to_the_next_one(lane):
    async def go():
        task = asyncio.create_task(lane.run(sleep_then, 111, 0.5, timeout_s=30))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await asyncio.gather(*(lane.run(sleep_then, i, 0.6, timeout_s=30) for i in range(2)))

    assert run(go()) == [0, 1]


def test_a_closed_lane_refuses_calls_and_starts_no_process():
    lane = Lane(1, get_context("forkserver"))

    async def go():
        assert await lane.run(add, 1, 1, timeout_s=30) == 2
        lane.close()
        with pytest.raises(WorkerLost):
            await lane.run(add, 1, 1, timeout_s=30)

    run(go())
    assert lane._all == set()


def test_garbage_is_collected_between_calls_not_during_them():
    lane = Lane(1, get_context("forkserver"))

    async def go():
        return [await lane.run(leave_cycles, 5000, timeout_s=30) for _ in range(3)]

    try:
        answers = run(go())
    finally:
        lane.close()
    # 5,000 cycles would set off a collection mid-call (the threshold is 700
    # allocations); none runs, yet each call finds the last call's cycles gone.
    assert answers == [(False, 0)] * 3


def test_what_outlived_a_call_is_collected_within_the_collectors_rounds():
    lane = Lane(1, get_context("forkserver"))

    async def go():
        await lane.run(add, 1, 2, timeout_s=30)  # what the first call keeps is frozen
        await lane.run(keep_a_cycle, True, timeout_s=30)
        return [await lane.run(keep_a_cycle, False, timeout_s=30) for _ in range(250)]

    try:
        alive = run(go())
    finally:
        lane.close()
    # Let go, the cycle lives on in an older generation: the young one alone was
    # collected after the call that let it go; the older ones in their turn.
    assert alive[1] is True
    assert alive[-1] is False


def test_between_calls_the_young_generation_is_collected_and_the_old_ones_in_turn():
    from casesignd.engine.lanes import _collect

    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.callbacks.append(note)
    try:
        for _ in range(250):
            _collect()
    finally:
        gc.callbacks.remove(note)
        if was_enabled:
            gc.enable()
    # The collector's own cadence: (700, 10, 10) makes about 10 young collections to
    # a middle one, and 10 middle ones to a full one.
    assert seen.count(0) > 5 * seen.count(1) > 0
    assert seen.count(1) > 5 * seen.count(2) > 0


def test_a_batch_is_shared_among_free_processes_and_answered_in_order():
    lane = Lane(2, get_context("forkserver"), batch=8)

    async def go():
        pids = await asyncio.gather(*(lane.run(slow_pid, 0.2, timeout_s=30) for _ in range(8)))
        values = await asyncio.gather(*(lane.run(add, i, 0, timeout_s=30) for i in range(40)))
        return pids, values

    try:
        pids, values = run(go())
    finally:
        lane.close()
    assert len(set(pids)) == 2  # not all eight to the first process that woke
    assert values == list(range(40))


def test_a_call_lost_in_a_batch_fails_what_follows_it_and_not_what_came_before():
    lane = Lane(1, get_context("forkserver"), batch=4)

    async def go():
        first = await asyncio.gather(lane.run(add, 1, 1, timeout_s=30), lane.run(die, timeout_s=30),
                                     lane.run(add, 2, 2, timeout_s=30), return_exceptions=True)
        slow = await asyncio.gather(lane.run(add, 3, 3, timeout_s=30),
                                    lane.run(sleep_then, 1, 600, timeout_s=0.5),
                                    lane.run(add, 4, 4, timeout_s=30), return_exceptions=True)
        return first, slow, await lane.run(add, 5, 5, timeout_s=30)

    try:
        first, slow, after = run(go())
    finally:
        lane.close()
    assert first[0] == 2 and isinstance(first[1], WorkerLost) and isinstance(first[2], WorkerLost)
    assert first[2].retryable and first[2].detail == {"reason": "exited"}
    assert slow[0] == 6 and slow[1].detail == {"reason": "timeout"}
    assert isinstance(slow[2], WorkerLost) and after == 10


def test_calls_waiting_when_the_lane_closes_fail_and_no_process_is_left():
    lane = Lane(1, get_context("forkserver"), batch=1)

    async def go():
        busy = asyncio.create_task(lane.run(sleep_then, 1, 5, timeout_s=30))
        queued = asyncio.create_task(lane.run(add, 1, 1, timeout_s=30))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lane.close)  # the daemon closes it from a thread
        return await asyncio.gather(busy, queued, return_exceptions=True)

    busy, queued = run(go())
    assert isinstance(busy, WorkerLost) and isinstance(queued, WorkerLost)
    assert lane._all == set()

"""Signing-key slots: the kiosk's reserved ones, borrowing free batch ones, and Busy."""

from __future__ import annotations

import asyncio
import os

import pytest

from casesignd.core.errors import Busy
from casesignd.signing.keys import FileSlots, KeySlots


async def test_a_kiosk_takes_its_slot_then_a_free_batch_one_then_waits_or_is_busy():
    slots = KeySlots(2, 1)
    async with slots.kiosk(1.0), slots.kiosk(1.0):
        assert slots.in_use == {"kiosk": 1, "batch": 1}
        with pytest.raises(Busy):
            async with slots.kiosk(0.05):
                pass
        # A waiter gets the next kiosk slot when one is released.
        waiter = asyncio.create_task(_hold(slots, 1.0))
        await asyncio.sleep(0.01)
        assert not waiter.done()
    assert await waiter == {"kiosk": 1, "batch": 0}
    assert slots.in_use == {"kiosk": 0, "batch": 0}


async def test_batch_jobs_never_take_the_kiosk_slot():
    slots = KeySlots(2, 1)
    async with slots.batch():
        held = asyncio.create_task(_hold_batch(slots))
        await asyncio.sleep(0.01)
        assert not held.done() and slots.in_use == {"kiosk": 0, "batch": 1}
        async with slots.kiosk(0.05):  # the kiosk's own slot is still free
            assert slots.in_use == {"kiosk": 1, "batch": 1}
    await held


async def _hold(slots: KeySlots, timeout_s: float) -> dict[str, int]:
    async with slots.kiosk(timeout_s):
        return dict(slots.in_use)


async def _hold_batch(slots: KeySlots) -> None:
    async with slots.batch():
        pass


def _hold_in_process(slot, held, release) -> None:
    with slot.slot():
        held.set()
        release.wait(10)


def _die_holding(slot, held) -> None:
    slot.acquire()
    held.set()
    os._exit(9)  # as an out-of-memory kill would: nothing released


async def test_batch_slots_shared_with_worker_processes_bound_both(tmp_path):
    # The batch worker processes take a batch slot around each key operation; the
    # event loop's batch users and a kiosk borrowing a batch slot count against the
    # same slots.
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    shared = FileSlots(tmp_path / "slots", 1)
    slots = KeySlots(2, 1, shared=shared)
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_in_process, args=(shared, held, release))
    proc.start()
    try:
        assert await asyncio.to_thread(held.wait, 30)
        assert slots.in_use == {"batch": 1, "kiosk": 0}
        waiter = asyncio.create_task(_hold_batch(slots))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # the process holds the one batch slot
        async with slots.kiosk(0.05):  # the kiosk still has its own
            assert slots.in_use == {"batch": 1, "kiosk": 1}
        release.set()
        await asyncio.wait_for(waiter, 10)
    finally:
        release.set()
        proc.join(10)
    assert slots.in_use == {"batch": 0, "kiosk": 0}


async def test_a_process_that_dies_holding_a_batch_slot_frees_it(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    shared = FileSlots(tmp_path / "slots", 1)
    slots = KeySlots(2, 1, shared=shared)
    held = ctx.Event()
    proc = ctx.Process(target=_die_holding, args=(shared, held))
    proc.start()
    assert await asyncio.to_thread(held.wait, 30)
    await asyncio.to_thread(proc.join, 30)
    assert proc.exitcode == 9
    async with slots.batch():  # the kernel dropped the dead process's lock
        assert slots.in_use["batch"] == 1


async def test_the_event_loop_counts_the_batch_slots_it_holds_itself(tmp_path):
    slots = KeySlots(3, 1, shared=FileSlots(tmp_path / "slots", 2))
    async with slots.batch(), slots.batch():
        assert slots.in_use == {"batch": 2, "kiosk": 0}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_hold_batch(slots), 0.05)
    assert slots.in_use == {"batch": 0, "kiosk": 0}

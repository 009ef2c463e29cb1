"""Signing-key slots: the kiosk's reserved ones, borrowing free batch ones, and Busy."""

from __future__ import annotations

import asyncio

import pytest

from casesignd.errors import Busy
from casesignd.keys import KeySlots


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

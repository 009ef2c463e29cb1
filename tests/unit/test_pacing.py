"""The pacing of acknowledgements: they wait while the queue stands and the workers
claim, and go one per claim, oldest first, or at the longest wait."""

from __future__ import annotations

import asyncio

import pytest

from casesignd.engine.pacing import AckPacer, pacing_depth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("configured,concurrency,depth", [
    (32, 4, 32), (32, 8, 32), (32, 20, 40), (1, 1, 2), (0, 8, 0),
])
def test_the_depth_is_at_least_two_claims_per_slot(configured, concurrency, depth):
    assert pacing_depth(configured, concurrency) == depth


def pacer(depth=2, max_wait_s=60.0, queued=0, claimed_now=True):
    clock = Clock()
    p = AckPacer(depth, max_wait_s, clock=clock)
    if claimed_now:
        p.observed(queued + 1)
        p.claimed(1)  # the workers are claiming
    else:
        p.observed(queued)
    return p, clock


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


async def test_under_the_depth_nothing_waits():
    p, _ = pacer(depth=2)
    assert await p.admitted() == 0.0
    assert await p.admitted() == 0.0
    assert p.queued == 2 and p.waiting == 0


async def test_over_the_depth_one_claim_lets_the_oldest_go():
    p, _ = pacer(depth=2, queued=2)
    first = asyncio.create_task(p.admitted())
    second = asyncio.create_task(p.admitted())
    await settle()
    assert p.waiting == 2 and not first.done() and not second.done()
    p.claimed(1)
    await settle()
    assert first.done() and not second.done()
    p.claimed(1)
    await settle()
    assert second.done() and p.waiting == 0


async def test_a_standing_queue_drains_to_the_depth_before_anything_goes():
    p, _ = pacer(depth=2, queued=10)
    waiting = asyncio.create_task(p.admitted())
    await settle()
    p.claimed(5)  # 6 queued, one of them waiting: 5 acknowledged, still over 2
    await settle()
    assert not waiting.done()
    p.observed(2)  # the store's count: other daemons claimed too
    await settle()
    assert waiting.done()


async def test_nothing_waits_while_the_workers_claim_nothing():
    p, clock = pacer(depth=2, max_wait_s=0.5, queued=5)
    clock.now += 0.6  # the last claim is older than the longest wait
    assert await p.admitted() == 0.0
    p2, _ = pacer(depth=2, queued=5, claimed_now=False)  # never claimed
    assert await p2.admitted() == 0.0


async def test_an_acknowledgement_is_held_at_most_the_longest_hold():
    p = AckPacer(2, 0.05)
    p.observed(5)
    p.claimed(1)
    assert p.should_wait()
    waited_s = await p.admitted()
    assert waited_s > 0 and p.waiting == 0


async def test_stopping_lets_every_held_acknowledgement_go():
    p, _ = pacer(depth=1, queued=3)
    tasks = [asyncio.create_task(p.admitted()) for _ in range(3)]
    await settle()
    assert p.waiting == 3
    p.release_all()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert p.waiting == 0


async def test_a_cancelled_request_leaves_the_line():
    p, _ = pacer(depth=1, queued=3)
    gone = asyncio.create_task(p.admitted())
    kept = asyncio.create_task(p.admitted())
    await settle()
    gone.cancel()
    await settle()
    assert p.waiting == 1
    p.observed(1)  # the line is one long, and it goes
    await settle()
    assert kept.done()


async def test_off_never_holds():
    p, _ = pacer(depth=0, queued=1000)
    assert not p.should_wait()
    assert await p.admitted() == 0.0

# ruff: noqa: F811 - the contract suite's fixtures, imported by name
"""Claims among tenants (casesignd.store.claims), on every store: pauses of a kind, of a
tenant and of both, which claims skip and which the audit chain records."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from casesignd.store import Pause, SqliteStore
from casesignd.store.claims import ShownPauses
from casesignd.store.postgres import PostgresStore
from tests.unit.test_store_contract import (  # noqa: F401
    admit,
    chain,
    new_job,
    store,
    store_and_clock,
)

ALL = 1 << 30


async def claim_all(store, kinds=("test",)) -> list:
    out = []
    while (claimed := await store.claim_batch("w", 10, ALL, list(kinds), 8)):
        out += [c.job for c in claimed]
    return out


async def test_a_paused_tenant_claims_nothing_and_resumes_at_once(store, tmp_path):
    await admit(store, key="a", tenant="t1")
    await admit(store, key="b", tenant="t2")
    assert await store.pause_claims(None, "t1", "operator:ops") is True
    assert await store.pause_claims(None, "t1", "operator:ops") is False  # already
    assert [j.tenant for j in await claim_all(store)] == ["t2"]
    assert await store.resume_claims(None, "t1", "operator:ops") is True
    assert await store.resume_claims(None, "t1", "operator:ops") is False  # none left
    assert [j.tenant for j in await claim_all(store)] == ["t1"]
    assert (await chain(store, tmp_path)).ok


async def test_a_paused_kind_holds_every_tenant_or_one(store):
    await admit(store, key="a", tenant="t1")
    await admit(store, key="b", tenant="t2")
    await store.pause_claims("test", None, "operator:ops")
    await store.pause_claims("test", "t2", "operator:ops")  # a narrower one, kept apart
    assert await claim_all(store) == []
    await store.resume_claims("test", None, "operator:ops")
    assert [j.tenant for j in await claim_all(store)] == ["t1"]  # t2's own pause holds
    await store.pause_claims("other", "t2", "operator:ops")  # another kind: no matter
    await store.resume_claims("test", "t2", "operator:ops")
    assert [j.tenant for j in await claim_all(store)] == ["t2"]


async def test_pauses_are_listed_and_audited(store_and_clock, tmp_path):
    store, clock = store_and_clock
    await store.pause_claims("test", None, "operator:ops")
    clock.now += 1
    await store.pause_claims(None, "t1", "operator:ops")
    pauses = await store.list_pauses()
    assert pauses == [Pause("test", None, pauses[0].since, "operator:ops"),
                      Pause(None, "t1", pauses[0].since + 1, "operator:ops")]
    await store.resume_claims("test", None, "operator:root")
    assert [p.tenant for p in await store.list_pauses()] == ["t1"]
    tail = await store.chain_tail(10)
    assert [(e["type"], e["tenant"], e["actor"], json.loads(e["detail"])) for e in tail] == [
        ("claims_paused", "", "operator:ops", {"kind": "test", "tenant": None}),
        ("claims_paused", "t1", "operator:ops", {"kind": None, "tenant": "t1"}),
        ("claims_resumed", "", "operator:root", {"kind": "test", "tenant": None})]
    assert (await chain(store, tmp_path)).ok


async def test_shown_pauses_follow_this_stores_changes_at_once(store):
    assert await store.shown_pauses() == []
    await store.pause_claims(None, "t1", "operator:ops")
    assert [p.tenant for p in await store.shown_pauses()] == ["t1"]
    await store.resume_claims(None, "t1", "operator:ops")
    assert await store.shown_pauses() == []


async def test_shown_pauses_follow_another_daemons_change_within_their_age(tmp_path):
    """A pause this store did not make (another daemon's, a command's: a row written
    beside it) shows once the pauses kept are older than their age; claims see it at
    once, since they read the pauses themselves."""
    store = SqliteStore(tmp_path / "store.db")
    await store.open()
    try:
        clock = Clock()
        store.shown = ShownPauses(max_age_s=1.0, clock=clock)
        await admit(store, key="a", tenant="t1")
        assert await store.shown_pauses() == []
        with sqlite3.connect(tmp_path / "store.db", timeout=10) as other:
            other.execute("INSERT INTO pauses (tenant, kind, since, actor) "
                          "VALUES ('t1', '', 0, 'operator:ops')")
        assert await claim_all(store) == []  # the claim reads the pause itself
        assert await store.shown_pauses() == []  # kept: younger than its age
        clock.now += 1.0
        assert [p.tenant for p in await store.shown_pauses()] == ["t1"]
    finally:
        await store.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_read_under_way_during_a_change_is_not_kept():
    shown = ShownPauses(max_age_s=60.0, clock=Clock())
    before = [Pause(None, "t1", 0.0, "operator:ops")]

    async def read_then_change():
        shown.forget()  # this daemon resumed while the read was under way
        return before

    assert await shown.read(read_then_change) == before
    assert shown.current() is None  # read again next time
    assert await shown.read(lambda: _value([])) == []
    assert shown.current() == []


async def _value(v):
    return v


# --- turns, priorities and schedules ---------------------------------------------------


async def post(store, tenant: str, key: str, **fields):
    """Admit a ``test`` job of ``tenant`` (``fields``: priority, not_before)."""
    new = dataclasses.replace(new_job(key, tenant=tenant), **fields)
    return (await store.admit(new, actor=f"api:{tenant}", max_queue_depth=100_000))[0]


async def test_tenants_take_turns_whatever_the_backlog(store):
    for i in range(30):
        await post(store, "a", f"a{i}")
    for i in range(3):
        await post(store, "b", f"b{i}")
    first = [c.job.tenant for c in await store.claim_batch("w", 10, ALL, ["test"], 6)]
    assert first == ["b", "a", "b", "a", "b", "a"] or first == ["a", "b", "a", "b", "a", "b"]
    assert {j.tenant for j in await claim_all(store)} == {"a"}


async def test_weights_give_a_tenant_more_turns(store):
    store.weigh_tenants({"a": 3})
    for i in range(40):
        await post(store, "a", f"a{i}")
        await post(store, "b", f"b{i}")
    taken = [c.job.tenant for c in await store.claim_batch("w", 10, ALL, ["test"], 8)]
    taken += [c.job.tenant for c in await store.claim_batch("w", 10, ALL, ["test"], 8)]
    assert taken.count("a") == 12 and taken.count("b") == 4


async def test_priority_orders_a_tenants_own_jobs_only(store):
    low = [await post(store, "a", f"low{i}", priority=9) for i in range(2)]
    mid = await post(store, "a", "mid", priority=5)
    high = await post(store, "a", "high", priority=0)
    other = await post(store, "b", "b-low", priority=9)
    order = [j.job_id for j in await claim_all(store)]
    mine = [i for i in order if i != other.job_id]
    assert mine == [high.job_id, mid.job_id, low[0].job_id, low[1].job_id]
    # b's one job, however low, is not held back behind a's better ones: its turn
    # comes within the first two claims.
    assert order.index(other.job_id) <= 1


async def test_a_scheduled_job_waits_for_the_stores_clock(store_and_clock):
    store, clock = store_and_clock
    later = await post(store, "a", "later", not_before=clock.now + 60)
    past = await post(store, "a", "past", not_before=clock.now - 60)
    assert later.state == "queued" and later.not_before == clock.now + 60
    assert later.next_attempt_at == clock.now + 60
    assert [j.job_id for j in await claim_all(store)] == [past.job_id]
    clock.now += 59.9
    assert await claim_all(store) == []
    clock.now += 0.2
    assert [j.job_id for j in await claim_all(store)] == [later.job_id]


async def test_a_scheduled_high_priority_job_holds_nothing_back(store_and_clock):
    store, clock = store_and_clock
    for i in range(5):
        await post(store, "a", f"later{i}", priority=0, not_before=clock.now + 60)
    due = await post(store, "a", "due", priority=9)
    assert [j.job_id for j in await claim_all(store)] == [due.job_id]


# --- the fairness test: counting claims, not timing them --------------------------------

WORKERS = 4


@pytest.fixture(params=["sqlite", "postgres"])
async def nodes(request, tmp_path):
    """The stores that claim: one SQLite daemon's, or two daemons' on one PostgreSQL."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        stores = [PostgresStore(dsn, node="node-a"), PostgresStore(dsn, node="node-b")]
    else:
        stores = [SqliteStore(tmp_path / "store.db")]
    for s in stores:
        await s.open()
    yield stores
    for s in stores:
        await s.close()


async def test_a_backlog_holds_another_tenants_jobs_back_by_a_few_claims_only(nodes):
    """Tenant a posts 2,000 jobs, then b posts 20: all of b's are claimed before a's
    backlog has dropped by more than b's own turns and a few claims per worker (on
    first-in-first-out claims, a's 2,000 go first)."""
    first = nodes[0]
    for i in range(2000):
        await post(first, "a", f"a{i}")
    for n in nodes:  # the daemons were at work on a's backlog when b came
        await n.claim_batch("w", 10, ALL, ["test"], WORKERS)
    for i in range(20):
        await post(first, "b", f"b{i}")
    a_taken = b_taken = claims = 0
    while b_taken < 20:
        node = nodes[claims % len(nodes)]
        claims += 1
        got = [c.job.tenant for c in await node.claim_batch("w", 10, ALL, ["test"], WORKERS)]
        a_taken += got.count("a")
        b_taken += got.count("b")
        assert claims < 2020 // WORKERS + 10, "b's jobs were never claimed"
    assert a_taken <= 20 + 2 * WORKERS * len(nodes), (a_taken, claims)

# ruff: noqa: F811 - the contract suite's fixtures, imported by name
"""Claims among tenants (casesignd.store.claims), on every store: pauses of a kind, of a
tenant and of both, which claims skip and which the audit chain records."""

from __future__ import annotations

import json

from casesignd.store import Pause
from tests.unit.test_store_contract import admit, chain, store, store_and_clock  # noqa: F401

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

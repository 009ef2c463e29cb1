# ruff: noqa: F811 - the contract suite's fixtures, imported by name
"""The data lifecycle's store verbs (casesignd.store.lifecycle), on every store: what a
retention sweep removes and what it keeps, legal holds, erasure, and the audit chain
through all of it."""

from __future__ import annotations

import hashlib

import pytest

from casesignd.core import audit
from casesignd.core.errors import Conflict, NotFound
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, Fail, Finish, Signature
from casesignd.engine import jobs
from casesignd.store import NewJob
from casesignd.store.memory import MemoryStore
from tests.unit.test_store_contract import chain, store, store_and_clock  # noqa: F401

DAY = 86400.0


def digest(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def sign_job(key: str, shas: list[str], case_id: str = "C-1", tenant: str = "t1") -> NewJob:
    body = {"case_id": case_id, "items": [
        {"role": "contract", "object_ref": f"sha256:{h}", "sha256": h, "size": 10} for h in shas]}
    return NewJob(
        tenant=tenant, kind="sign_case", case_id=case_id, idem_key="key:" + key,
        fingerprint=jobs.fingerprint("sign_case", body), input=audit.canonical(body).decode(),
        input_digest=sha256_hex(audit.canonical(body)), version="v1",
        declared_bytes=10, created_at=0.0, correlation_id="corr")


async def run(store, new: NewJob, outcome=None):
    """Admit ``new`` and end its one attempt with ``outcome`` (None: leave it queued)."""
    job, _ = await store.admit(new, actor="api:t1", max_queue_depth=100)
    if outcome is None:
        return job
    claimed = await store.claim_job(job.job_id, "w", 10)
    return await store.conclude(claimed.lease, outcome)


async def expire_all(store, area: str, cutoff: float) -> list:
    return await store.expire(area, cutoff, 100)


async def test_objects_live_while_a_job_may_use_them_and_objects_s_after_the_last(store_and_clock, tmp_path):
    store, clock = store_and_clock
    t0 = clock.now
    for n in range(4):
        await store.put_object("t1", "C-1", digest(n), 10)
    await run(store, sign_job("done", [digest(0)]), Finish())
    await run(store, sign_job("queued", [digest(1)]))
    await run(store, sign_job("failed", [digest(2)]), Fail("retries_exhausted", "source_unavailable"))
    # digest(3): uploaded and never used.
    clock.now = t0 + 10
    # Kept for 5 s from the end of the last job that used it (t0): all are still young.
    assert await expire_all(store, "objects", clock.now - 20) == []
    removed = await expire_all(store, "objects", clock.now - 5)
    assert {r.key for r in removed} == {digest(0), digest(3)}
    assert all(r.what == "object" and r.case_id == "C-1" for r in removed)
    # Queued and failed jobs keep what they use, however old.
    assert await expire_all(store, "objects", clock.now + DAY) == []
    assert (await chain(store, tmp_path)).ok


async def test_a_removed_jobs_end_still_counts_for_its_objects(store_and_clock):
    store, clock = store_and_clock
    await store.put_object("t1", "C-1", digest(0), 10)
    clock.now += 100
    await run(store, sign_job("late", [digest(0)]), Finish())
    assert [r.key for r in await expire_all(store, "jobs", clock.now + 1)]
    # The object was uploaded 100 s before the job ended: it counts from the end.
    assert await expire_all(store, "objects", clock.now - 50) == []
    assert [r.key for r in await expire_all(store, "objects", clock.now + 1)] == [digest(0)]


async def test_jobs_and_rejected_jobs_expire_apart_and_free_their_keys(store_and_clock, tmp_path):
    store, clock = store_and_clock
    ok = await run(store, sign_job("ok", [digest(0)]), Finish())
    bad = await run(store, sign_job("bad", [digest(1)]), Fail("permanent_input", "malformed_pdf"))
    waiting = await run(store, sign_job("waiting", [digest(2)]))
    clock.now += 10
    assert [r.key for r in await expire_all(store, "rejected", clock.now)] == [bad.job_id]
    assert [r.key for r in await expire_all(store, "jobs", clock.now)] == [ok.job_id]
    assert await store.get_job("t1", ok.job_id) is None
    assert await store.get_job("t1", bad.job_id) is None
    assert (await store.get_job("t1", waiting.job_id)).state == "queued"
    # The events stay, and say what went; the key is free for a new job.
    types = [e["type"] for e in await store.events("t1", ok.job_id)]
    assert types[-1] == "job_removed"
    again, created = await store.admit(sign_job("ok", [digest(0)]), actor="api:t1",
                                       max_queue_depth=100)
    assert created and again.job_id != ok.job_id
    if not isinstance(store, MemoryStore):
        assert (await store.stats())["states"] == {"queued": 2}
    assert (await chain(store, tmp_path)).ok


async def test_artifacts_expire_with_their_bytes_and_signature_record(store_and_clock):
    store, clock = store_and_clock
    art = Artifact("art_1", "a" * 64, 5)
    await run(store, sign_job("s", [digest(0)]),
              Finish(art, signature=Signature("sig1", art, inline=b"%PDF-")))
    assert await store.artifact_data("art_1") == b"%PDF-"
    clock.now += 10
    (removed,) = await expire_all(store, "artifacts", clock.now)
    assert (removed.what, removed.key, removed.size, removed.case_id) == ("artifact", "art_1", 5, "C-1")
    assert await store.get_artifact("art_1") is None
    assert await store.artifact_data("art_1") is None
    assert await store.get_signature("t1", "sig1") is None


async def test_a_hold_keeps_everything_and_refuses_erasure(store_and_clock, tmp_path):
    store, clock = store_and_clock
    await store.put_object("t1", "C-1", digest(0), 10)
    art = Artifact("art_h", "b" * 64, 5)
    await run(store, sign_job("h", [digest(0)]), Finish(art))
    hold = await store.set_hold("t1", "C-1", "api:t1", placed=True)
    assert hold["placed_at"] > 0
    assert (await store.set_hold("t1", "C-1", "api:t1", placed=True))["placed_at"] == hold["placed_at"]
    assert await store.get_hold("t2", "C-1") is None  # another tenant's case
    clock.now += DAY
    for area in ("jobs", "artifacts", "objects"):
        assert await expire_all(store, area, clock.now) == []
    with pytest.raises(Conflict) as e:
        await store.erase_case("t1", "C-1", "api:t1")
    assert e.value.code == "on_hold"
    await store.set_hold("t1", "C-1", "api:t1", placed=False)
    assert await store.get_hold("t1", "C-1") is None
    assert {r.what for r in await expire_all(store, "artifacts", clock.now)} == {"artifact"}
    assert (await chain(store, tmp_path)).ok


async def test_erasure_removes_a_case_now_and_cancels_its_waiting_jobs(store_and_clock, tmp_path):
    store, clock = store_and_clock
    for n in range(2):
        await store.put_object("t1", "C-1", digest(n), 10)
    await store.put_object("t1", "C-2", digest(0), 10)
    art = Artifact("art_e", "c" * 64, 5)
    await run(store, sign_job("e1", [digest(0)]), Finish(art))
    queued = await run(store, sign_job("e2", [digest(1)]))
    other = await run(store, sign_job("e3", [digest(0)], case_id="C-2"))
    erased = await store.erase_case("t1", "C-1", "api:t1")
    assert sorted((r.what, r.key) for r in erased.removed) == sorted(
        [("object", digest(0)), ("object", digest(1)), ("artifact", "art_e")])
    assert [j.job_id for j in erased.canceled] == [queued.job_id]
    assert (await store.get_job("t1", queued.job_id)).state == "canceled"
    assert (await store.get_job("t1", other.job_id)).state == "queued"
    assert await store.get_artifact("art_e") is None
    # A running job of the case: erasure waits for it.
    running = await run(store, sign_job("e4", [digest(0)], case_id="C-2"))
    await store.claim_job(running.job_id, "w", 10)
    with pytest.raises(Conflict) as e:
        await store.erase_case("t1", "C-2", "api:t1")
    assert e.value.code == "case_busy"
    assert (await chain(store, tmp_path)).ok


async def test_disk_use_counts_what_the_store_names(store):
    await store.put_object("t1", "C-1", digest(0), 10)
    await store.put_object("t1", "C-1", digest(0), 10)
    await store.put_object("t1", "C-2", digest(1), 7)
    assert await store.disk_use() == {"objects": 17, "artifacts": 0}


async def test_a_refused_jobs_end_does_not_extend_its_documents(store_and_clock):
    store, clock = store_and_clock
    await store.put_object("t1", "C-1", digest(0), 10)
    clock.now += 100
    await run(store, sign_job("refused", [digest(0)]), Fail("permanent_input", "malformed_pdf"))
    assert await expire_all(store, "objects", clock.now) == []  # its job keeps it
    assert [r.what for r in await expire_all(store, "rejected", clock.now + 1)] == ["job"]
    assert [r.key for r in await expire_all(store, "objects", clock.now - 50)] == [digest(0)]


async def test_a_job_whose_artifact_went_keeps_its_digest_and_size_and_says_when(store_and_clock):
    store, clock = store_and_clock
    art = Artifact("art_r", "d" * 64, 7)
    done = await run(store, sign_job("r", [digest(0)]), Finish(art))
    clock.now += 10
    assert [r.key for r in await expire_all(store, "artifacts", clock.now)] == ["art_r"]
    result = (await store.get_job("t1", done.job_id)).result_dict()["artifact"]
    assert (result["artifact_id"], result["sha256"], result["size"]) == ("art_r", "d" * 64, 7)
    assert result["removed_at"] == pytest.approx(clock.now)
    # Erased the same way: the job says when its artifact went.
    erased = await run(store, sign_job("x", [digest(1)], case_id="C-9"), Finish(Artifact("art_x", "e" * 64, 3)))
    clock.now += 1
    await store.erase_case("t1", "C-9", "api:t1")
    result = (await store.get_job("t1", erased.job_id)).result_dict()["artifact"]
    assert (result["sha256"], result["removed_at"]) == ("e" * 64, pytest.approx(clock.now))


async def test_erasing_a_case_the_tenant_does_not_have_records_nothing(store_and_clock, tmp_path):
    store, clock = store_and_clock
    await store.put_object("t1", "C-1", digest(0), 10)
    head = (await chain(store, tmp_path)).checked
    for tenant, case_id in (("t1", "C-0"), ("t2", "C-1")):
        with pytest.raises(NotFound) as e:
            await store.erase_case(tenant, case_id, f"api:{tenant}")
        assert e.value.code == "case_not_found"
    assert (await chain(store, tmp_path)).checked == head
    # A case whose job is all that is left: answered, and nothing recorded.
    await run(store, sign_job("n", [digest(1)], case_id="C-2"), Fail("permanent_input", "malformed_pdf"))
    head = (await chain(store, tmp_path)).checked
    erased = await store.erase_case("t1", "C-2", "api:t1")
    assert (erased.removed, erased.canceled) == ([], [])
    assert (await chain(store, tmp_path)).checked == head

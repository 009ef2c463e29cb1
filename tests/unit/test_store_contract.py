"""The store contract: every Store implementation passes these (SQLite, the embedded
one, PostgreSQL, and the one in memory). A test of what only a file gives (a lock, SQL
constraints, triggers) runs against SQLite alone. PostgreSQL runs on a throwaway
cluster (tests/helpers_postgres.py), a fresh database per test."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time

import pytest

from casesignd.core import audit
from casesignd.core.errors import Conflict, NotFound, QueueFull, TenantQueueFull
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, Fail, Finish, RetryLater, Signature
from casesignd.engine import jobs
from casesignd.engine.reservations import KeyReservations
from casesignd.store import Flight, IdempotencyKeyReused, NewJob, SqliteStore, new_id
from casesignd.store.memory import MemoryStore
from casesignd.store.postgres import PostgresStore


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def store_and_clock(request, tmp_path):
    clock = Clock()
    if request.param == "memory":
        store = MemoryStore(clock=clock)
    elif request.param == "postgres":
        store = PostgresStore(request.getfixturevalue("postgres_dsn"), clock=clock)
    else:
        store = SqliteStore(tmp_path / "store.db", clock=clock)
    await store.open()
    yield store, clock
    await store.close()


@pytest.fixture
def store(store_and_clock):
    return store_and_clock[0]


async def chain(store, tmp_path) -> audit.AuditReport:
    """The whole audit chain of ``store``, verified."""
    if isinstance(store, MemoryStore):
        return audit.verify_rows(store.all_events())
    if isinstance(store, PostgresStore):
        return await asyncio.to_thread(audit.verify_postgres, store.dsn)
    return audit.verify_file(tmp_path / "store.db")


def sqlite_only(store) -> None:
    if not isinstance(store, SqliteStore):
        pytest.skip("what only the SQLite file gives")


def new_job(key: str = "k1", tenant: str = "t1", body: dict | None = None, size: int = 0) -> NewJob:
    body = body or {"x": 1}
    return NewJob(
        tenant=tenant, kind="test", case_id="C-1", idem_key="key:" + key,
        fingerprint=jobs.fingerprint("test", body), input=audit.canonical(body).decode(),
        input_digest=sha256_hex(audit.canonical(body)), version="v1",
        declared_bytes=size, created_at=time.time(), correlation_id="corr",
    )


async def admit(store, **kw):
    return await store.admit(new_job(**kw), actor="api:t1", max_queue_depth=100)


async def test_admit_is_idempotent_per_tenant_and_key(store):
    job, created = await admit(store)
    again, created2 = await admit(store)
    assert created and not created2 and again.job_id == job.job_id
    other, created3 = await admit(store, tenant="t2")
    assert created3 and other.job_id != job.job_id
    with pytest.raises(IdempotencyKeyReused):
        await admit(store, body={"x": 2})


async def test_concurrent_identical_admissions_make_one_job(store):
    results = await asyncio.gather(*(admit(store) for _ in range(50)))
    assert len({j.job_id for j, _ in results}) == 1
    assert sum(created for _, created in results) == 1


async def test_queue_depth_limit(store):
    await store.admit(new_job("a"), actor="a", max_queue_depth=1)
    with pytest.raises(QueueFull):
        await store.admit(new_job("b"), actor="a", max_queue_depth=1)


async def test_claim_finish_and_fencing(store_and_clock):
    store, clock = store_and_clock
    job, _ = await admit(store)
    claimed = await store.claim("w1", 10, 1 << 30, ["test"])
    assert claimed.job_id == job.job_id and claimed.attempt == 1 and claimed.state == "running"
    assert await store.claim("w1", 10, 1 << 30, ["test"]) is None
    # The lease expires; another owner takes attempt 2; the first one's result is refused.
    clock.now += 11
    reclaimed = await store.reclaim_expired(max_lost=5)
    assert [j.job_id for j in reclaimed] == [job.job_id]
    second = await store.claim("w2", 10, 1 << 30, ["test"])
    assert second.attempt == 2
    assert await store.conclude(claimed.lease, Finish(detail={"ok": 1})) is None
    done = await store.conclude(second.lease, Finish(detail={"ok": 2}))
    assert done.state == "succeeded" and done.result_dict() == {"detail": {"ok": 2}}
    types = [e["type"] for e in await store.events("t1", job.job_id)]
    assert types == ["admitted", "claimed", "lease_expired", "claimed",
                     "stale_result_dropped", "succeeded"]


async def test_claim_respects_byte_budget_and_kinds(store):
    await admit(store, key="big", size=1000)
    assert await store.claim("w", 10, 999, ["test"]) is None
    assert await store.claim("w", 10, 1000, ["other"]) is None
    assert (await store.claim("w", 10, 1000, ["test"])).declared_bytes == 1000


async def test_renew_reports_lost_leases(store_and_clock):
    store, clock = store_and_clock
    await admit(store)
    job = await store.claim("w1", 10, 1 << 30, ["test"])
    assert await store.renew([job.lease], 10) == []
    clock.now += 11
    await store.reclaim_expired(max_lost=5)
    assert await store.renew([job.lease], 10) == [job.lease]


async def test_retry_wait_then_requeue(store_and_clock):
    store, clock = store_and_clock
    await admit(store)
    job = await store.claim("w", 10, 1 << 30, ["test"])
    waiting = await store.conclude(job.lease, RetryLater("source_unavailable", 5.0))
    assert waiting.state == "retry_wait" and waiting.failures == 1
    assert await store.promote_due() == []
    clock.now += 5
    (requeued,) = await store.promote_due()
    assert requeued.state == "queued"
    again = await store.claim("w", 10, 1 << 30, ["test"])
    assert again.attempt == 2


async def test_fail_replay_cancel(store):
    job, _ = await admit(store)
    with pytest.raises(Conflict) as e:
        await store.replay("t1", job.job_id, "api", max_queue_depth=100)
    assert e.value.code == "not_failed"
    running = await store.claim("w", 10, 1 << 30, ["test"])
    with pytest.raises(Conflict) as e:
        await store.cancel("t1", job.job_id, "api")
    assert e.value.code == "not_cancelable"
    failed = await store.conclude(running.lease, Fail("permanent_input", "malformed_pdf"))
    assert failed.state == "failed" and failed.error_code == "malformed_pdf"
    replayed = await store.replay("t1", job.job_id, "api", max_queue_depth=100)
    assert replayed.state == "queued" and replayed.series == 2 and replayed.failures == 0
    with pytest.raises(NotFound):
        await store.cancel("t2", job.job_id, "api")
    canceled = await store.cancel("t1", job.job_id, "api")
    assert canceled.state == "canceled"


async def test_lost_leases_fail_the_job(store_and_clock):
    store, clock = store_and_clock
    job, _ = await admit(store)
    for _ in range(2):
        await store.claim("w", 1, 1 << 30, ["test"])
        clock.now += 2
        reclaimed = await store.reclaim_expired(max_lost=2)
    assert reclaimed[0].state == "failed" and reclaimed[0].error_category == "lost"


async def test_release_requeues_without_counting_a_loss(store):
    await admit(store)
    job = await store.claim("w", 10, 1 << 30, ["test"])
    released = await store.release(job.lease)
    assert released.state == "queued" and released.lost_leases == 0


async def test_reclaim_a_nodes_leases_at_its_start(store):
    await admit(store)
    await store.claim("node-a:100:ab12", 1000, 1 << 30, ["test"])
    (job,) = await store.reclaim_expired(max_lost=5, at_start_of="node-a")
    assert job.state == "queued"


async def test_signature_is_put_once(store):
    job, _ = await admit(store)
    first = await store.record_signature(job, "sig1", {"artifact_id": "a1", "sha256": "0" * 64, "size": 1})
    second = await store.record_signature(job, "sig1", {"artifact_id": "a2", "sha256": "1" * 64, "size": 2})
    assert first["artifact_id"] == second["artifact_id"] == "a1"


async def test_list_jobs_pages_newest_first(store):
    ids = [(await admit(store, key=f"k{i}"))[0].job_id for i in range(5)]
    page, cursor = await store.list_jobs("t1", None, 2, None)
    assert [j.job_id for j in page] == ids[::-1][:2] and cursor
    rest, cursor2 = await store.list_jobs("t1", ["queued"], 10, cursor)
    assert [j.job_id for j in rest] == ids[::-1][2:] and cursor2 is None
    assert (await store.list_jobs("t2", None, 10, None))[0] == []


async def test_list_jobs_filters_by_kind_and_case(store):
    made = {}
    for i, (kind, case) in enumerate([("test", "C-1"), ("other", "C-1"), ("test", "C-2"),
                                      ("test", "C-1"), ("other", "C-2")]):
        new = dataclasses.replace(new_job(key=f"k{i}"), kind=kind, case_id=case)
        made[i] = (await store.admit(new, actor="api:t1", max_queue_depth=100))[0].job_id
    await store.cancel("t1", made[3], "api:t1")

    async def ids(**kw) -> list[str]:
        out, cursor = [], None
        while True:  # pages of one: the cursor carries the filters' place
            page, cursor = await store.list_jobs("t1", kw.get("states"), 1, cursor,
                                                 kind=kw.get("kind"), case_id=kw.get("case_id"))
            out += [j.job_id for j in page]
            if cursor is None:
                return out

    assert await ids(kind="test") == [made[3], made[2], made[0]]
    assert await ids(case_id="C-1") == [made[3], made[1], made[0]]
    assert await ids(kind="test", case_id="C-1") == [made[3], made[0]]
    assert await ids(kind="test", case_id="C-1", states=["queued"]) == [made[0]]
    assert await ids(kind="other", states=["queued"]) == [made[4], made[1]]
    assert await ids(case_id="C-9") == []
    assert (await store.list_jobs("t2", None, 10, None, kind="test", case_id="C-1"))[0] == []


async def test_tenant_activity_counts_live_jobs_and_buckets_the_ended(store_and_clock):
    store, clock = store_and_clock
    since = clock.now - 3600
    ok, _ = await admit(store, key="a")
    await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    bad, _ = await admit(store, key="b")
    await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease,
                         Fail("permanent_input", "x"))
    await admit(store, key="c")
    await admit(store, key="d", tenant="t2")
    act = await store.tenant_activity("t1", since, 60.0)
    assert act.live["queued"][0] == 1 and act.live["queued"][1] is not None
    assert act.live["failed"][0] == 1 and "running" not in act.live
    rows = {r["state"]: r for r in act.ended}
    assert set(rows) == {"succeeded", "failed"}
    for r in rows.values():
        assert int(r["n"]) == 1 and int(r["bucket"]) == 60
        assert r["total_max"] >= r["total_mean"] and r["processing_max"] >= r["processing_mean"] >= 0
    assert (await store.tenant_activity("t1", clock.now + 60, 60.0)).ended == []
    assert (await store.tenant_activity("t3", since, 60.0)).live == {}


async def test_chain_samples_verify_and_name_their_predecessors(store):
    for i in range(3):
        await admit(store, key=f"k{i}")
        await admit(store, key=f"o{i}", tenant="t2")
    tail = await store.chain_tail(4)
    assert [e["seq"] for e in tail] == [3, 4, 5, 6]
    assert audit.verify_sample(tail, await store.event_hashes([2])).ok
    assert not audit.verify_sample(tail, {}).ok  # event 2 unknown: not verified
    mine = await store.tenant_recent_events("t1", 2)
    assert [e["seq"] for e in mine] == [3, 5] and {e["tenant"] for e in mine} == {"t1"}
    before = await store.event_hashes([e["seq"] - 1 for e in mine])
    assert set(before) == {2, 4} and audit.verify_sample(mine, before).ok
    forged = [dict(mine[0], detail='{"kind":"other"}'), mine[1]]
    report = audit.verify_sample(forged, before)
    assert not report.ok and report.first_bad["seq"] == 3


async def test_audit_chain_verifies_and_is_append_only(store, tmp_path):
    job, _ = await admit(store)
    claimed = await store.claim("w", 10, 1 << 30, ["test"])
    await store.conclude(claimed.lease, Finish())
    report = await chain(store, tmp_path)
    assert report.ok and report.checked == 3
    if isinstance(store, PostgresStore):
        import psycopg

        with psycopg.connect(store.dsn, autocommit=True) as conn:
            for sql in ("UPDATE events SET actor = 'x' WHERE seq = 2", "DELETE FROM events",
                        "TRUNCATE events"):
                with pytest.raises(psycopg.IntegrityError):
                    conn.execute(sql)
        return
    if not isinstance(store, SqliteStore):
        return
    conn = sqlite3.connect(tmp_path / "store.db")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE events SET actor = 'x' WHERE seq = 2")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("DELETE FROM events")
    conn.close()


async def test_a_failed_operation_does_not_break_the_batch_or_chain(store, tmp_path):
    job, _ = await admit(store)
    outcomes = await asyncio.gather(
        admit(store, key="k1", body={"different": True}), admit(store, key="k2"),
        return_exceptions=True)
    assert isinstance(outcomes[0], IdempotencyKeyReused) and outcomes[1][1]
    assert (await chain(store, tmp_path)).ok


async def test_a_second_process_cannot_open_the_store(store, tmp_path):
    from casesignd.core.errors import StoreUnavailable
    sqlite_only(store)
    other = SqliteStore(tmp_path / "store.db")
    with pytest.raises(StoreUnavailable):
        await other.open()



async def test_the_waiting_and_state_counts_follow_every_transition(store_and_clock, tmp_path):
    # The counts a store keeps (SQLite: triggers; PostgreSQL: the writer, per
    # statement) against counting the rows.
    store, clock = store_and_clock
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store counts its rows")

    def waiting() -> int:
        if isinstance(store, PostgresStore):
            import psycopg

            with psycopg.connect(store.dsn) as conn:
                by_state = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
                kept = conn.execute("SELECT sum(n)::int FROM job_counts "
                                    "WHERE state IN ('queued', 'retry_wait')").fetchone()[0]
            counted = by_state.get("queued", 0) + by_state.get("retry_wait", 0)
        else:
            conn = sqlite3.connect(tmp_path / "store.db")
            try:
                counted = conn.execute(
                    "SELECT count(*) FROM jobs WHERE state IN ('queued', 'retry_wait')").fetchone()[0]
                kept = conn.execute("SELECT value FROM counters WHERE name = 'waiting'").fetchone()[0]
                by_state = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
            finally:
                conn.close()
        assert kept == counted
        assert by_state == states[0]
        return kept

    states: list[dict[str, int]] = [{}]

    async def check() -> int:
        states[0] = (await store.stats())["states"]
        return waiting()

    a, _ = await admit(store, key="a")
    b, _ = await admit(store, key="b")
    assert await check() == 2
    ja = await store.claim("w", 1, 1 << 30, ["test"])
    assert await check() == 1
    await store.conclude(ja.lease, RetryLater("x", 0.0))
    assert await check() == 2
    await store.cancel("t1", b.job_id, "api")
    assert await check() == 1
    await store.promote_due()
    jb = await store.claim("w", 1, 1 << 30, ["test"])
    assert await check() == 0
    clock.now += 5
    await store.reclaim_expired(max_lost=5)
    assert await check() == 1
    with pytest.raises(QueueFull):
        await store.admit(new_job("c"), actor="a", max_queue_depth=1)
    assert await check() == 1 and jb
    jc = await store.claim("w", 1, 1 << 30, ["test"])
    await store.conclude(jc.lease, Finish())
    assert await check() == 0
    # The other transitions: fail and replay, release, a canceled retry, kiosk
    # flights written at once and running first, a lease lost for good.
    jd, _ = await admit(store, key="d")
    await store.conclude((await store.claim("w", 1, 1 << 30, ["test"])).lease, Fail("permanent_input", "x"))
    assert await check() == 0
    await store.replay("t1", jd.job_id, "api", max_queue_depth=100)
    assert await check() == 1
    await store.release((await store.claim("w", 1, 1 << 30, ["test"])).lease)
    assert await check() == 1
    await store.conclude((await store.claim("w", 1, 1 << 30, ["test"])).lease, RetryLater("x", 100.0))
    assert await check() == 1
    await store.cancel("t1", jd.job_id, "api")
    assert await check() == 0
    f = flight(clock, key="count-1")
    await store.record_flight(f)
    g = flight(clock, key="count-2")
    await store.persist_flight(g)
    assert await check() == 0
    g.outcome = Fail("permanent_input", "x")
    await store.record_flight(g)
    await admit(store, key="e")
    await store.claim("w", 1, 1 << 30, ["test"])
    clock.now += 5
    await store.reclaim_expired(max_lost=1)
    assert await check() == 0 and states[0] == {"succeeded": 2, "failed": 2, "canceled": 2}


async def test_a_replay_respects_the_queue_depth(store):
    job, _ = await admit(store, key="failed")
    running = await store.claim("w", 10, 1 << 30, ["test"])
    await store.conclude(running.lease, Fail("permanent_input", "malformed_pdf"))
    await admit(store, key="waiting")
    with pytest.raises(QueueFull) as e:
        await store.replay("t1", job.job_id, "api", max_queue_depth=1)
    assert e.value.headers["Retry-After"]
    assert (await store.get_job("t1", job.job_id)).state == "failed"
    # Refusals that do not depend on the queue come first: another tenant's job is
    # absent, and a job that is not failed is not_failed, however full the queue.
    with pytest.raises(NotFound):
        await store.replay("t2", job.job_id, "api", max_queue_depth=1)
    replayed = await store.replay("t1", job.job_id, "api", max_queue_depth=2)
    assert replayed.state == "queued"
    with pytest.raises(Conflict) as e:
        await store.replay("t1", job.job_id, "api", max_queue_depth=1)
    assert e.value.code == "not_failed"
    assert [ev["type"] for ev in await store.events("t1", job.job_id)].count("replayed") == 1


async def test_a_replay_respects_the_tenants_waiting_limit(store):
    job, _ = await admit(store, key="failed")
    running = await store.claim("w", 10, 1 << 30, ["test"])
    await store.conclude(running.lease, Fail("permanent_input", "malformed_pdf"))
    await admit(store, key="waiting")
    await admit(store, key="theirs", tenant="t2")  # another tenant's waiting job: not counted
    with pytest.raises(TenantQueueFull) as e:
        await store.replay("t1", job.job_id, "api", max_queue_depth=100, max_queued=1)
    assert e.value.headers["Retry-After"]
    assert (await store.get_job("t1", job.job_id)).state == "failed"
    with pytest.raises(NotFound):  # absent comes first, as with the queue depth
        await store.replay("t2", job.job_id, "api", max_queue_depth=100, max_queued=1)
    replayed = await store.replay("t1", job.job_id, "api", max_queue_depth=100, max_queued=2)
    assert replayed.state == "queued"


async def test_admissions_in_one_batch_respect_the_queue_depth(store):
    results = await asyncio.gather(*(store.admit(new_job(f"q{i}"), actor="a", max_queue_depth=3)
                                     for i in range(6)), return_exceptions=True)
    assert sum(isinstance(r, QueueFull) for r in results) == 3
    assert (await store.stats())["states"] == {"queued": 3}


def flight(store_clock: Clock, key: str = "kiosk-1", **kw) -> Flight:
    now = store_clock.now
    return Flight(new=new_job(key), job_id=new_id("job", now), actor="api:t1", owner="w",
                  lease_s=30.0, admitted_at=now, claimed_at=now, **kw)


async def test_a_flight_is_written_whole_in_one_commit(store_and_clock):
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    f = flight(clock)
    assert await reservations.reserve("t1", f.new.idem_key, "sig-1", f.token) == (None, None)
    # Held: an admission of the same key, or a second kiosk request, is in progress.
    with pytest.raises(Conflict) as e:
        await reservations.admit(f.new, actor="api:t1", max_queue_depth=100)
    assert e.value.code == "in_progress"
    with pytest.raises(Conflict):
        await reservations.reserve("t1", f.new.idem_key, "sig-1", object())
    assert await store.get_job("t1", f.job_id) is None
    art = Artifact("art_" + "1" * 32, "ab" * 32, 3)
    f.outcome = Finish(art, signature=Signature("sig-1", art, {"signers": []}, b"pdf"))
    done = await reservations.record_flight(f)
    assert done is not None and done.state == "succeeded" and done.job_id == f.job_id
    assert [e["type"] for e in await store.events("t1", f.job_id)] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]
    assert await store.artifact_data(art.artifact_id) == b"pdf"
    assert (await store.get_signature("t1", "sig-1"))["artifact_id"] == art.artifact_id
    # Released: the key now names the job, for a kiosk replay and an admission alike.
    existing, _ = await reservations.reserve("t1", f.new.idem_key, "sig-1", object())
    assert existing is not None and existing.job_id == f.job_id
    job, created = await store.admit(f.new, actor="api:t1", max_queue_depth=100)
    assert not created and job.job_id == f.job_id
    # Another key of the same signature finds the recorded one.
    g = flight(clock, key="kiosk-2")
    assert (await reservations.reserve("t1", g.new.idem_key, "sig-1", g.token))[1]["sha256"] == "ab" * 32
    reservations.unreserve("t1", g.new.idem_key, g.token)
    assert (await store.admit(g.new, actor="api:t1", max_queue_depth=100))[1] is True


async def test_the_admitting_trace_is_kept_with_the_job_and_read_with_its_claim(store_and_clock):
    store, clock = store_and_clock
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    job, _ = await store.admit(dataclasses.replace(new_job("traced"), traceparent=tp),
                               actor="api:t1", max_queue_depth=100)
    assert job.traceparent == tp
    assert (await admit(store, key="untraced"))[0].traceparent is None
    [claimed] = [c.job for c in await store.claim_batch("w1", 10, 1 << 30, ["test"], 8)
                 if c.job.job_id == job.job_id]
    assert claimed.traceparent == tp
    # A kiosk flight keeps its request's, whichever way it is written.
    f = flight(clock, key="kiosk-traced")
    f.new = dataclasses.replace(f.new, traceparent=tp)
    reservations = KeyReservations(store)
    assert await reservations.reserve("t1", f.new.idem_key, "sig-t", f.token) == (None, None)
    f.outcome = Finish(detail={})
    done = await reservations.record_flight(f)
    assert done is not None and done.traceparent == tp


async def test_a_persisted_flight_is_a_running_job_that_its_record_finishes(store_and_clock):
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    f = flight(clock)
    await reservations.reserve("t1", f.new.idem_key, "sig-2", f.token)
    running = await store.persist_flight(f)
    assert running.state == "running" and running.lease_owner == "w"
    assert (await store.get_job("t1", f.job_id)).state == "running"
    f.outcome = Fail("permanent_input", "malformed_pdf")
    done = await reservations.record_flight(f)
    assert done.state == "failed" and done.error_code == "malformed_pdf"
    assert [e["type"] for e in await store.events("t1", f.job_id)] == [
        "admitted", "claimed", "failed"]


async def test_a_flight_answered_late_reads_as_its_running_row_until_that_is_written(
        store_and_clock):
    # A kiosk 504 names its job (X-Job-Id) before the row may be written: until then the
    # job reads from the reservations as its row will, to its own tenant alone.
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    f = flight(clock, key="kiosk-late")
    f.new = dataclasses.replace(f.new, created_at=f.admitted_at - 0.002)
    f.claimed_at = f.admitted_at + 0.004
    await reservations.reserve("t1", f.new.idem_key, "sig-late", f.token)
    assert reservations.late_job("t1", f.job_id) is None
    reservations.answered_late(f)
    early = reservations.late_job("t1", f.job_id)
    assert early is not None and early.state == "running"
    assert reservations.late_job("t2", f.job_id) is None
    assert await store.get_job("t1", f.job_id) is None
    clock.now += 0.01
    row = await store.persist_flight(f)
    reservations.landed(f)
    assert reservations.late_job("t1", f.job_id) is None
    # The same job but for its lease, which the write runs from its own time.
    assert {k for k in row.__struct_fields__ if getattr(row, k) != getattr(early, k)} == {
        "lease_expires"}
    f.outcome = Finish(detail={})
    assert (await reservations.record_flight(f)).state == "succeeded"


async def test_an_unreserved_key_is_free_again(store_and_clock):
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    f = flight(clock)
    await reservations.reserve("t1", f.new.idem_key, "sig-3", f.token)
    reservations.unreserve("t1", f.new.idem_key, f.token)
    # On PostgreSQL the key's lock is given back in the background: until then an
    # admission is answered in_progress (retryable), never as a full queue.
    for _ in range(200):
        try:
            created = (await admit(store, key="kiosk-1"))[1]
            break
        except Conflict as e:
            assert e.code == "in_progress"
            await asyncio.sleep(0.01)
    assert created is True


async def test_a_signed_flight_leaves_the_rows_and_events_of_an_admission_claim_and_finish(
        store_and_clock):
    # A flight written at once (one request, nothing persisted before) and one written
    # as running first (past its deadline) end in the same row and the same events.
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    written = {}
    for path in ("at once", "running first"):
        f = flight(clock, key=f"kiosk-{path}")
        f.new = dataclasses.replace(f.new, created_at=f.admitted_at - 0.002)
        f.claimed_at = f.admitted_at + 0.004
        art = Artifact("art_" + "1" * 32, "ab" * 32, 3)
        f.outcome = Finish(art, signature=Signature(f"sig-{path}", art, {"signers": [["k", "clerk"]]},
                                                    b"pdf"))
        await reservations.reserve("t1", f.new.idem_key, f"sig-{path}", f.token)
        clock.now += 0.01
        if path == "running first":
            await store.persist_flight(f)
        done = await reservations.record_flight(f)
        row = {k: getattr(done, k) for k in done.__struct_fields__ if k not in ("job_id", "idem_key")}
        events = [{k: e[k] for k in ("type", "actor", "attempt", "at", "policy_version",
                                     "input_digest", "case_id")}
                  | {"detail": {k: v for k, v in e["detail"].items() if k != "sig_key"}}
                  for e in await store.events("t1", f.job_id)]
        written[path] = (row, events)
        clock.now -= 0.01
    assert written["at once"] == written["running first"]
    states = (await store.stats())["states"]
    assert {k: v for k, v in states.items() if v} == {"succeeded": 2}


@pytest.mark.parametrize("first", ["record", "persist"])
async def test_a_flight_persisted_as_it_is_recorded_is_written_once(store_and_clock, first):
    # The deadline can pass while the record is on its way: both writes may land in
    # one batch, in either order, and the job is written once, finished.
    store, clock = store_and_clock
    reservations = KeyReservations(store)
    f = flight(clock)
    art = Artifact("art_" + "2" * 32, "cd" * 32, 3)
    f.outcome = Finish(art, signature=Signature("sig-race", art, {"signers": []}))
    await reservations.reserve("t1", f.new.idem_key, "sig-race", f.token)
    if first == "record":
        record = asyncio.ensure_future(reservations.record_flight(f))
        persist = asyncio.ensure_future(store.persist_flight(f))
    else:
        persist = asyncio.ensure_future(store.persist_flight(f))
        record = asyncio.ensure_future(reservations.record_flight(f))
    done = await record
    await persist
    assert done is not None and done.state == "succeeded"
    assert (await store.get_job("t1", f.job_id)).state == "succeeded"
    assert [e["type"] for e in await store.events("t1", f.job_id)] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]


async def test_a_second_signature_of_one_key_names_the_recorded_bytes(store_and_clock):
    # Two jobs of one signature key that both signed: the artifact id is the key's, so
    # both name the same id, but only the first bytes are kept. The later finish, and
    # the later kiosk flight, must name those bytes, not their own.
    store, clock = store_and_clock
    art_id = "art_" + "3" * 32
    first = Artifact(art_id, "aa" * 32, 3)
    await admit(store, key="b1", body={"n": 1})
    await admit(store, key="b2", body={"n": 2})
    a, b = await store.claim_batch("w", 30, 1 << 30, ["test"], 2)
    await store.conclude(a.job.lease, Finish(first, signature=Signature("sig-twice", first, {}, b"AAA")))
    mine = Artifact(art_id, "bb" * 32, 4)
    done = await store.conclude(b.job.lease,
                                Finish(mine, signature=Signature("sig-twice", mine, {}, b"BBBB")))
    f = flight(clock, key="kiosk-twice")
    await store.lookup_key("t1", f.new.idem_key, "sig-twice")
    f.outcome = Finish(mine, signature=Signature("sig-twice", mine, {}, b"BBBB"))
    flown = await store.record_flight(f)
    for job in (done, flown, await store.get_job("t1", flown.job_id)):
        assert job.result_dict()["artifact"] == {**first.record(), "media_type": "application/pdf"}
    assert await store.artifact_data(art_id) == b"AAA"
    assert (await store.get_artifact(art_id))["sha256"] == first.sha256
    for job in (done, flown):
        succeeded = [e for e in await store.events("t1", job.job_id) if e["type"] == "succeeded"]
        assert succeeded[0]["detail"]["result"]["artifact"]["sha256"] == first.sha256


async def test_a_claim_takes_several_jobs_in_one_go_within_the_budget(store):
    for i in range(5):
        await admit(store, key=f"b{i}", body={"i": i}, size=10)
    claimed = await store.claim_batch("w", 10, 35, ["test"], 4)
    # Oldest first, and only as many as the byte budget lets in together.
    assert [c.job.declared_bytes for c in claimed] == [10, 10, 10]
    assert all(c.job.state == "running" and c.signature is None for c in claimed)
    rest = await store.claim_batch("w", 10, 1 << 30, ["test"], 4)
    assert len(rest) == 2 and {c.job.job_id for c in rest}.isdisjoint(c.job.job_id for c in claimed)
    assert await store.claim_batch("w", 10, 1 << 30, ["test"], 4) == []


async def test_a_claim_reads_the_signature_recorded_for_the_job(store):
    first = dataclasses.replace(new_job("s1", body={"a": 1}), sig_key="sig-x")
    second = dataclasses.replace(new_job("s2", body={"a": 2}), sig_key="sig-x")
    await store.admit(first, actor="api:t1", max_queue_depth=100)
    (c1,) = await store.claim_batch("w", 10, 1 << 30, ["test"], 1)
    assert c1.signature is None
    art = Artifact("art_" + "3" * 32, "ef" * 32, 5)
    done = await store.conclude(c1.job.lease, Finish(art, {"documents": 1},
                                                     Signature("sig-x", art, {"signers": []}, b"%PDF-")))
    assert done.state == "succeeded" and done.result_dict()["artifact"]["artifact_id"] == art.artifact_id
    assert [e["type"] for e in await store.events("t1", c1.job.job_id)] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]
    assert await store.artifact_data(art.artifact_id) == b"%PDF-"
    assert (await store.get_artifact(art.artifact_id))["job_id"] == c1.job.job_id
    await store.admit(second, actor="api:t1", max_queue_depth=100)
    (c2,) = await store.claim_batch("w", 10, 1 << 30, ["test"], 1)
    assert c2.signature is not None and c2.signature["artifact_id"] == art.artifact_id


async def test_a_finish_whose_signature_was_recorded_before_names_the_recorded_one(store):
    await store.admit(dataclasses.replace(new_job("r1", body={"r": 1}), sig_key="sig-r"),
                      actor="api:t1", max_queue_depth=100)
    await store.admit(dataclasses.replace(new_job("r2", body={"r": 2}), sig_key="sig-r"),
                      actor="api:t1", max_queue_depth=100)
    a, b = await store.claim_batch("w", 10, 1 << 30, ["test"], 2)
    art_a = Artifact("art_" + "a" * 32, "aa" * 32, 1)
    art_b = Artifact("art_" + "b" * 32, "bb" * 32, 2)
    await store.conclude(a.job.lease, Finish(art_a, signature=Signature("sig-r", art_a)))
    done = await store.conclude(b.job.lease, Finish(art_b, signature=Signature("sig-r", art_b, None, b"x")))
    assert done.result_dict()["artifact"]["artifact_id"] == art_a.artifact_id
    assert "signature_recorded" not in [e["type"] for e in await store.events("t1", b.job.job_id)]


async def test_a_stale_finish_records_no_signature(store_and_clock):
    store, clock = store_and_clock
    await store.admit(dataclasses.replace(new_job("st"), sig_key="sig-st"), actor="api:t1",
                      max_queue_depth=100)
    claimed = await store.claim("w", 1, 1 << 30, ["test"])
    clock.now += 5
    await store.reclaim_expired(max_lost=5)
    art = Artifact("art_" + "5" * 32, "55" * 32, 1)
    assert await store.conclude(claimed.lease, Finish(art, signature=Signature("sig-st", art))) is None
    assert await store.get_signature("t1", "sig-st") is None
    assert [e["type"] for e in await store.events("t1", claimed.job_id)][-1] == "stale_result_dropped"


async def test_a_renewal_is_due_until_an_artifact_renews_it(store_and_clock):
    store, clock = store_and_clock
    soon = Artifact("art_" + "6" * 32, "66" * 32, 1, timestamp_expires_at=clock.now + 100)
    later = Artifact("art_" + "7" * 32, "77" * 32, 1, timestamp_expires_at=clock.now + 1000)
    plain = Artifact("art_" + "8" * 32, "88" * 32, 1)
    for i, art in enumerate((later, soon, plain)):
        await admit(store, key=f"r{i}")
        claimed = await store.claim("w1", 10, 1 << 30, ["test"])
        await store.conclude(claimed.lease, Finish(artifact=art))
    assert await store.due_renewals(clock.now + 50, 10) == []
    due = [(soon.artifact_id, "t1", soon.timestamp_expires_at),
           (later.artifact_id, "t1", later.timestamp_expires_at)]
    assert await store.due_renewals(clock.now + 5000, 10) == due
    assert await store.due_renewals(clock.now + 5000, 1) == due[:1]
    # Another tenant's job cannot mark it; the renewing artifact takes its place.
    renewed = Artifact("art_" + "9" * 32, "99" * 32, 2, timestamp_expires_at=clock.now + 9000)
    await admit(store, key="other", tenant="t2")
    claimed = await store.claim("w1", 10, 1 << 30, ["test"])
    await store.conclude(claimed.lease, Finish(artifact=Artifact("art_" + "a" * 32, "aa" * 32, 1),
                                               renews=soon.artifact_id))
    assert await store.due_renewals(clock.now + 5000, 10) == due
    await admit(store, key="renew")
    claimed = await store.claim("w1", 10, 1 << 30, ["test"])
    await store.conclude(claimed.lease, Finish(artifact=renewed, renews=soon.artifact_id))
    assert await store.due_renewals(clock.now + 5000, 10) == due[1:]
    assert await store.due_renewals(clock.now + 10_000, 10) == [
        due[1], (renewed.artifact_id, "t1", renewed.timestamp_expires_at)]


# --- the webhook outbox ------------------------------------------------------------------


async def test_a_delivery_is_written_with_each_reported_state_change(store_and_clock):
    store, clock = store_and_clock
    hooked = {"x": 1, "webhook": "erp"}

    async def claimed():
        return (await store.claim("w", 10, 1 << 30, ["test"])).lease

    ready, _ = await admit(store, key="r", body=hooked)
    await store.conclude(await claimed(), Finish(detail={"ok": 1}))
    failed, _ = await admit(store, key="f", body={**hooked, "x": 2})
    await store.conclude(await claimed(), Fail("permanent_input", "malformed_pdf"))
    canceled, _ = await admit(store, key="c", body={**hooked, "x": 3})
    await store.cancel("t1", canceled.job_id, "api")
    await admit(store, key="p")  # names no endpoint: no delivery
    await store.conclude(await claimed(), Finish())
    listed = await store.list_deliveries("t1", 10)
    assert sorted((d.job_id, d.event) for d in listed) == sorted([
        (ready.job_id, "job.ready"), (failed.job_id, "job.failed"),
        (canceled.job_id, "job.canceled")])
    assert {d.endpoint for d in listed} == {"erp"} and {d.state for d in listed} == {"pending"}
    assert await store.list_deliveries("t2", 10) == []
    assert [d.event for d in await store.list_deliveries("t1", 10, job_id=ready.job_id)] == [
        "job.ready"]
    counts, oldest = await store.delivery_stats()
    assert counts == {"pending": 3, "delivered": 0, "dead": 0, "skipped": 0} and oldest is not None


async def test_a_stale_result_writes_no_delivery(store_and_clock):
    store, clock = store_and_clock
    await admit(store, body={"x": 1, "webhook": "erp"})
    first = await store.claim("w1", 10, 1 << 30, ["test"])
    clock.now += 11
    await store.reclaim_expired(max_lost=5)
    second = await store.claim("w2", 10, 1 << 30, ["test"])
    assert await store.conclude(first.lease, Finish()) is None
    assert await store.list_deliveries("t1", 10) == []
    await store.conclude(second.lease, Finish())
    assert len(await store.list_deliveries("t1", 10)) == 1


async def test_deliveries_are_leased_one_sender_at_a_time_and_fenced(store_and_clock):
    store, clock = store_and_clock
    await admit(store, body={"x": 1, "webhook": "erp"})
    await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    [d] = await store.take_deliveries("n1", 30, 10)
    assert d.attempts == 1 and d.lease_owner == "n1"
    assert await store.take_deliveries("n2", 30, 10) == []  # leased
    assert await store.settle_delivery(d, "pending", next_at=clock.now + 5, status=500)
    assert await store.take_deliveries("n2", 30, 10) == []  # not due yet
    clock.now += 6
    [again] = await store.take_deliveries("n2", 30, 10)
    assert again.attempts == 2 and again.last_status == 500
    # n2's lease runs out; n1 takes it back, and n2's late outcome is dropped.
    clock.now += 31
    [third] = await store.take_deliveries("n1", 30, 10)
    assert not await store.settle_delivery(again, "delivered", status=200)
    assert await store.settle_delivery(third, "delivered", status=204)
    [done] = await store.list_deliveries("t1", 10)
    assert done.state == "delivered" and done.attempts == 3 and done.delivered_at is not None
    assert await store.take_deliveries("n1", 30, 10) == []
    assert (await store.delivery_stats()) == ({"pending": 0, "delivered": 1, "dead": 0, "skipped": 0}, None)
    # Sent again on request: due now, its attempt count going on; another tenant's is none.
    assert await store.redeliver("t2", done.delivery_id) is None
    again = await store.redeliver("t1", done.delivery_id)
    assert again.state == "pending" and again.attempts == 3
    assert (await store.redeliver("t1", done.delivery_id)).state == "pending"
    [fourth] = await store.take_deliveries("n1", 30, 10)
    assert fourth.attempts == 4


async def test_a_tenants_backlog_of_deliveries_does_not_hold_back_anothers(store_and_clock):
    # t1's receiver is slow or down and its deliveries pile up; t2's one, due later,
    # is in the very next take, as claims take turns between tenants.
    store, clock = store_and_clock
    for i in range(6):
        await admit(store, key=f"a{i}", body={"x": i, "webhook": "erp"})
        await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
        clock.now += 1
    await admit(store, key="b", tenant="t2", body={"x": "b", "webhook": "erp"})
    await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    batch = await store.take_deliveries("n", 30, 3)
    assert sorted(d.tenant for d in batch) == ["t1", "t1", "t2"]
    # Within a tenant, oldest first as before.
    oldest = sorted(await store.list_deliveries("t1", 10), key=lambda d: d.created_at)[:2]
    assert {d.delivery_id for d in batch if d.tenant == "t1"} == {d.delivery_id for d in oldest}


async def test_retention_removes_ended_deliveries_and_keeps_pending_ones(store_and_clock):
    store, clock = store_and_clock
    for i in range(3):
        await admit(store, key=f"k{i}", body={"x": i, "webhook": "erp"})
        await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    delivered, dead, pending = await store.take_deliveries("n", 30, 10)
    assert await store.settle_delivery(delivered, "delivered", status=204)
    assert await store.settle_delivery(dead, "dead", status=410)
    assert await store.settle_delivery(pending, "pending", next_at=clock.now + 3600, status=500)
    ended_at = clock.now
    assert await store.expire_deliveries(ended_at, 10) == 0  # not before the cutoff
    clock.now += 100
    assert await store.expire_deliveries(ended_at + 1, 1) == 1  # a batch at a time
    assert await store.expire_deliveries(ended_at + 1, 10) == 1
    [left] = await store.list_deliveries("t1", 10)
    assert left.delivery_id == pending.delivery_id and left.state == "pending"
    assert (await store.delivery_stats())[0]["pending"] == 1
    # The job a pending delivery reports stays too: the delivery's body is made from it.
    removed = await store.expire("jobs", clock.now + 1, 10)
    assert sorted(r.key for r in removed) == sorted([delivered.job_id, dead.job_id])
    assert await store.get_job("t1", pending.job_id) is not None


async def test_two_senders_never_take_one_delivery_together(store_and_clock):
    store, clock = store_and_clock
    # On PostgreSQL the second sender is another daemon's store on the same database.
    other = PostgresStore(store.dsn, clock=clock) if isinstance(store, PostgresStore) else store
    if other is not store:
        await other.open()
    try:
        for i in range(20):
            await admit(store, key=f"k{i}", body={"x": i, "webhook": "erp"})
            await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
        taken: list[list] = [[], []]

        async def sender(i, s):
            while batch := await s.take_deliveries(f"n{i}", 30, 3):
                taken[i].extend(d.delivery_id for d in batch)

        await asyncio.gather(sender(0, store), sender(1, other))
        assert not set(taken[0]) & set(taken[1])
        assert len(taken[0]) + len(taken[1]) == 20
    finally:
        if other is not store:
            await other.close()


async def test_a_tenant_takes_deliveries_up_to_its_room(store_and_clock):
    # The sender says how many more each tenant may have in flight: one whose receiver
    # hangs holds only so many places, and the others' deliveries are taken beside it.
    store, clock = store_and_clock
    for i in range(6):
        await admit(store, key=f"a{i}", body={"x": i, "webhook": "erp"})
        await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    for i in range(3):
        await admit(store, key=f"b{i}", tenant="t2", body={"x": i, "webhook": "erp"})
        await store.conclude((await store.claim("w", 10, 1 << 30, ["test"])).lease, Finish())
    first = await store.take_deliveries("n", 30, 10, per_tenant=2)
    assert sorted(d.tenant for d in first) == ["t1", "t1", "t2", "t2"]
    # t1 has 2 in flight and a room of 3: one more; t2 none, by the default room.
    second = await store.take_deliveries("n", 30, 10, per_tenant=2, rooms={"t1": 1, "t2": 0})
    assert [d.tenant for d in second] == ["t1"]
    assert await store.take_deliveries("n", 30, 10, per_tenant=0) == []
    rest = await store.take_deliveries("n", 30, 10)
    assert sorted(d.tenant for d in rest) == ["t1", "t1", "t1", "t2"]


async def test_the_keys_of_artifacts_never_recorded_go_and_a_record_keeps_its_key(store_and_clock):
    """A publication writes its artifact's data key before the finish records it; a
    crash in between leaves the key alone, which the start-up sweep drops once it is
    older than the sweep's cutoff. The finish writes the key again with the record,
    so a key dropped from under a publication in flight stands again."""
    from casesignd.core.keyring import WrappedKey

    store, clock = store_and_clock
    unrecorded = WrappedKey("artifact:art_" + "1" * 32, "k1", b"w" * 60)
    recorded = WrappedKey("artifact:art_" + "2" * 32, "k1", b"x" * 60)
    obj = WrappedKey("object:" + "ab" * 32, "k1", b"y" * 60)
    for k in (unrecorded, recorded, obj):
        await store.put_data_key(k)
    await admit(store)
    claimed = await store.claim("w1", 10, 1 << 30, ["test"])
    art = Artifact(recorded.owner.removeprefix("artifact:"), "aa" * 32, 1, data_key=recorded)
    assert (await store.conclude(claimed.lease, Finish(artifact=art))).state == "succeeded"
    assert await store.drop_unrecorded_keys(clock.now - 60) == 0  # young: a publication may be in flight
    clock.now += 120
    young = WrappedKey("artifact:art_" + "3" * 32, "k1", b"z" * 60)
    await store.put_data_key(young)
    assert await store.drop_unrecorded_keys(clock.now - 60) == 1
    assert await store.data_key(unrecorded.owner) is None
    for k in (recorded, obj, young):
        assert await store.data_key(k.owner) == k
    # A finish whose key was dropped meanwhile writes it again.
    await admit(store, key="k2")
    second = await store.claim("w1", 10, 1 << 30, ["test"])
    art2 = Artifact(unrecorded.owner.removeprefix("artifact:"), "bb" * 32, 1, data_key=unrecorded)
    assert (await store.conclude(second.lease, Finish(artifact=art2))).state == "succeeded"
    assert await store.data_key(unrecorded.owner) == unrecorded

"""Two daemons on one PostgreSQL: two PostgresStore instances, each with its own
writer and readers, on one database, as two casesignd processes would be. What one
process's memory cannot give must hold here: a job claimed once, one job per key,
one signature per signature key, one unbroken audit chain, a stale owner refused,
and a dead daemon's leases taken back by the other."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time

import psycopg
import pytest

from casesignd.core import audit
from casesignd.core.errors import Conflict, StoreUnavailable
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, Finish, RetryLater, Signature
from casesignd.engine import jobs
from casesignd.engine.reservations import KeyReservations
from casesignd.store import Flight, IdempotencyKeyReused, NewJob, new_id
from casesignd.store.postgres import PostgresStore
from casesignd.store.sqlfiles import migrations


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def new_job(key: str, tenant: str = "t1", body: dict | None = None, sig_key: str | None = None) -> NewJob:
    body = body or {"key": key}
    raw = audit.canonical(body)
    return NewJob(tenant=tenant, kind="test", case_id="C-1", idem_key="key:" + key,
                  fingerprint=jobs.fingerprint("test", body), input=raw.decode(),
                  input_digest=sha256_hex(raw), version="v1", declared_bytes=0,
                  created_at=time.time(), correlation_id="corr", sig_key=sig_key)


@pytest.fixture
async def daemons(postgres_dsn):
    """Two stores on one database ("node-a" and "node-b"), the database's clock."""
    made = [PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)]
    await asyncio.gather(*(s.open() for s in made))  # both migrate at once: one does
    yield made
    for s in made:
        await s.close()


@pytest.fixture
async def clocked(postgres_dsn):
    """Two stores on one database sharing one test clock (for lease expiry)."""
    clock = Clock()
    made = [PostgresStore(postgres_dsn, clock=clock), PostgresStore(postgres_dsn, clock=clock)]
    for s in made:
        await s.open()
    yield made, clock
    for s in made:
        await s.close()


def verified(dsn: str) -> audit.AuditReport:
    report = audit.verify_postgres(dsn)
    with psycopg.connect(dsn) as conn:
        count, head = conn.execute(
            "SELECT (SELECT count(*) FROM events), (SELECT seq FROM audit_head)").fetchone()
    assert report.ok, report.first_bad
    assert report.checked == count == head
    return report


async def test_two_daemons_claiming_at_once_never_take_the_same_job(daemons, postgres_dsn):
    a, b = daemons
    n = 400
    await asyncio.gather(*(store.admit(new_job(f"j{i}"), actor="api:t1", max_queue_depth=n)
                           for i, store in zip(range(n), [a, b] * n, strict=False)))
    claims: list[tuple[str, str, int]] = []

    async def consumer(store: PostgresStore, owner: str) -> None:
        while True:
            got = await store.claim_batch(owner, 30.0, 1 << 40, ["test"], 3)
            if not got:
                if (await store.stats())["states"].get("queued", 0) == 0:
                    return
                continue
            for c in got:
                claims.append((c.job.job_id, owner, c.job.attempt))
            await asyncio.gather(*(store.conclude(c.job.lease, Finish()) for c in got))

    await asyncio.gather(*(consumer(store, f"node-{name}:w{w}")
                           for store, name in ((a, "a"), (b, "b")) for w in range(8)))
    ids = [job_id for job_id, _, _ in claims]
    assert len(ids) == len(set(ids)) == n
    assert {attempt for _, _, attempt in claims} == {1}
    # Both daemons did part of the work.
    assert {owner.split(":")[0] for _, owner, _ in claims} == {"node-a", "node-b"}
    assert (await a.stats())["states"] == {"succeeded": n}
    assert verified(postgres_dsn).checked == 3 * n


async def test_identical_admissions_on_both_daemons_make_one_job(daemons):
    a, b = daemons
    results = await asyncio.gather(*(store.admit(new_job("same"), actor="api:t1", max_queue_depth=100)
                                     for store in [a, b] * 25))
    assert len({job.job_id for job, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    # Many keys at once, each admitted by both daemons: one job per key.
    keys = [f"k{i}" for i in range(60)]
    both = await asyncio.gather(*(store.admit(new_job(k), actor="api:t1", max_queue_depth=1000)
                                  for k in keys for store in (a, b)))
    per_key: dict[str, set[str]] = {}
    for job, _ in both:
        per_key.setdefault(job.idem_key, set()).add(job.job_id)
    assert all(len(v) == 1 for v in per_key.values()) and len(per_key) == len(keys)
    assert sum(created for _, created in both) == len(keys)
    with pytest.raises(IdempotencyKeyReused):
        await b.admit(new_job("same", body={"other": 1}), actor="api:t1", max_queue_depth=100)


async def test_a_signature_is_recorded_once_across_daemons(daemons, postgres_dsn):
    a, b = daemons
    first = dataclasses.replace(new_job("s1"), sig_key="sig-shared")
    second = dataclasses.replace(new_job("s2"), sig_key="sig-shared")
    await a.admit(first, actor="api:t1", max_queue_depth=100)
    await b.admit(second, actor="api:t1", max_queue_depth=100)
    (ca,) = await a.claim_batch("node-a:w", 30.0, 1 << 30, ["test"], 1)
    (cb,) = await b.claim_batch("node-b:w", 30.0, 1 << 30, ["test"], 1)
    art_a = Artifact("art_" + "a" * 32, "aa" * 32, 1)
    art_b = Artifact("art_" + "b" * 32, "bb" * 32, 2)
    done_a, done_b = await asyncio.gather(
        a.conclude(ca.job.lease, Finish(art_a, signature=Signature("sig-shared", art_a, {}, b"A"))),
        b.conclude(cb.job.lease, Finish(art_b, signature=Signature("sig-shared", art_b, {}, b"B"))))
    named = {done_a.result_dict()["artifact"]["artifact_id"],
             done_b.result_dict()["artifact"]["artifact_id"]}
    assert len(named) == 1
    recorded = await b.get_signature("t1", "sig-shared")
    assert named == {recorded["artifact_id"]}
    types = [e["type"] for j in (ca.job, cb.job) for e in await a.events("t1", j.job_id)]
    assert types.count("signature_recorded") == 1 and types.count("signed") == 1
    # record_signature from both at once, many times: one record, and it stands.
    job = ca.job
    records = await asyncio.gather(*(
        store.record_signature(job, "sig-direct", {"artifact_id": f"art_{i}", "sha256": "0" * 64,
                                                   "size": i})
        for i, store in enumerate([a, b] * 10)))
    assert len({r["artifact_id"] for r in records}) == 1
    verified(postgres_dsn)


async def locking(store: PostgresStore, sig_key: str) -> dict | None:
    """Lock ``sig_key`` on ``store`` and let go at once: what was recorded under it."""
    async with store.key_locks.signature("t1", sig_key) as recorded:
        return recorded


async def test_a_signature_key_is_held_by_one_daemon_at_a_time(daemons):
    a, b = daemons
    await a.admit(dataclasses.replace(new_job("h1"), sig_key="sig-held"), actor="api:t1",
                  max_queue_depth=100)
    (claimed,) = await a.claim_batch("node-a:w", 30.0, 1 << 30, ["test"], 1)
    art = Artifact("art_" + "c" * 32, "cc" * 32, 3)
    async with a.key_locks.signature("t1", "sig-held") as recorded:
        assert recorded is None
        waiting = asyncio.ensure_future(locking(b, "sig-held"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await a.conclude(claimed.job.lease, Finish(art, signature=Signature("sig-held", art, {})))
    # Once b has locked the key, it reads what a recorded before letting go.
    seen = await asyncio.wait_for(waiting, 10)
    assert seen is not None and seen["sha256"] == art.sha256


async def test_a_daemons_end_frees_the_keys_it_held(daemons):
    a, b = daemons
    held = contextlib.AsyncExitStack()
    await held.enter_async_context(b.key_locks.signature("t1", "sig-dead"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(locking(a, "sig-dead"), 0.5)
    await b._key_locks.close()  # its session ends, as when the daemon dies
    assert await asyncio.wait_for(locking(a, "sig-dead"), 5) is None
    await held.aclose()  # nothing left to give back


async def test_a_hold_given_up_while_waiting_leaves_the_key_free(daemons):
    a, b = daemons
    async with a.key_locks.signature("t1", "sig-cancel"):
        waiting = asyncio.ensure_future(locking(b, "sig-cancel"))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert await asyncio.wait_for(locking(a, "sig-cancel"), 5) is None
    assert await asyncio.wait_for(locking(b, "sig-cancel"), 5) is None


async def test_a_key_a_kiosk_request_holds_on_one_daemon_is_in_progress_on_the_other(daemons):
    a, b = daemons
    on_a, on_b = KeyReservations(a), KeyReservations(b)
    now = time.time()
    f = Flight(new=new_job("kiosk-held"), job_id=new_id("job", now), actor="api:t1",
               owner="node-a:w", lease_s=30.0, admitted_at=now, claimed_at=now)
    assert await on_a.reserve("t1", f.new.idem_key, "sig-k", f.token) == (None, None)
    # Until its job is written, the key is in progress for an admission or a kiosk
    # request on the other daemon.
    for attempt in (on_b.admit(f.new, actor="api:t1", max_queue_depth=100),
                    on_b.reserve("t1", f.new.idem_key, "sig-k", object())):
        with pytest.raises(Conflict) as e:
            await attempt
        assert e.value.code == "in_progress"
    art = Artifact("art_" + "d" * 32, "dd" * 32, 3)
    f.outcome = Finish(art, signature=Signature("sig-k", art, {}, b"pdf"))
    done = await on_a.record_flight(f)
    # Written: the key names the job on both daemons.
    job, created = await on_b.admit(f.new, actor="api:t1", max_queue_depth=100)
    assert not created and job.job_id == done.job_id == f.job_id
    existing, _ = await on_b.reserve("t1", f.new.idem_key, "sig-k", object())
    assert existing is not None and existing.job_id == f.job_id


async def test_an_admission_under_way_on_one_daemon_is_in_progress_for_a_kiosk_on_the_other(
        daemons):
    a, b = daemons
    new = new_job("admitting")
    gate = threading.Event()

    def admitting(tx) -> None:
        # An admission's transaction, stopped after it took its key (shared).
        assert not tx.one("idem_key_locked", tenant=new.tenant, idem_key=new.idem_key)["locked"]
        gate.wait(10)

    held = asyncio.ensure_future(b._write(admitting))
    await asyncio.sleep(0.2)
    try:
        with pytest.raises(Conflict) as e:
            await KeyReservations(a).reserve("t1", new.idem_key, "sig-a", object())
        assert e.value.code == "in_progress"
        # Admissions do not hold each other up.
        job, created = await a.admit(new, actor="api:t1", max_queue_depth=100)
        assert created
    finally:
        gate.set()
        await held


async def test_the_audit_chain_stays_one_chain_when_both_daemons_write(daemons, postgres_dsn):
    a, b = daemons

    async def traffic(store: PostgresStore, name: str) -> None:
        for i in range(40):
            job, _ = await store.admit(new_job(f"{name}{i}"), actor=f"api:{name}", max_queue_depth=10_000)
            await store.append_event(job, "note", f"api:{name}", {"i": i})
            got = await store.claim_batch(f"{name}:w", 30.0, 1 << 30, ["test"], 2)
            for c in got:
                outcome = RetryLater("busy", 0.0) if i % 3 == 0 else Finish()
                await store.conclude(c.job.lease, outcome)
            await store.promote_due()

    await asyncio.gather(*(traffic(store, f"{name}{k}")
                           for store, name in ((a, "node-a"), (b, "node-b")) for k in range(4)))
    report = verified(postgres_dsn)
    assert report.checked > 8 * 40 * 3
    with psycopg.connect(postgres_dsn) as conn:
        nodes = [r[0] for r in conn.execute(
            "SELECT substring(actor FROM 'node-[ab]') FROM events WHERE actor LIKE 'api:%' ORDER BY seq")]
    # The two writers' transactions took turns on the one chain, many times over.
    turns = sum(1 for x, y in zip(nodes, nodes[1:], strict=False) if x != y)
    assert set(nodes) == {"node-a", "node-b"} and turns > 10


async def test_a_stale_owner_is_refused_by_the_other_daemon(clocked):
    (a, b), clock = clocked
    job, _ = await a.admit(new_job("stale"), actor="api:t1", max_queue_depth=100)
    held = await a.claim("node-a:w", 10.0, 1 << 30, ["test"])
    clock.now += 11  # node-a stalls past its lease
    reclaimed = await b.reclaim_expired(max_lost=5)
    assert [j.job_id for j in reclaimed] == [job.job_id] and reclaimed[0].state == "queued"
    again = await b.claim("node-b:w", 10.0, 1 << 30, ["test"])
    assert again.attempt == 2 and again.lease_owner == "node-b:w"
    assert await a.renew([held.lease], 10.0) == [held.lease]
    assert await a.conclude(held.lease, Finish(detail={"from": "a"})) is None
    done = await b.conclude(again.lease, Finish(detail={"from": "b"}))
    assert done.result_dict() == {"detail": {"from": "b"}}
    assert [e["type"] for e in await a.events("t1", job.job_id)] == [
        "admitted", "claimed", "lease_expired", "claimed", "stale_result_dropped", "succeeded"]


async def test_a_dead_daemons_leases_are_reclaimed_by_the_other_on_the_database_clock(daemons):
    a, b = daemons
    for i in range(30):
        await a.admit(new_job(f"d{i}"), actor="api:t1", max_queue_depth=100)
    taken = await a.claim_batch("node-a:w", 0.3, 1 << 30, ["test"], 30)
    assert len(taken) == 30
    assert await b.reclaim_expired(max_lost=5) == []  # not expired yet
    await a.close()  # node-a dies holding the leases
    await asyncio.sleep(0.5)
    # Both of node-b's sweeps at once: each expired job is taken back exactly once.
    first, second = await asyncio.gather(b.reclaim_expired(max_lost=5), b.reclaim_expired(max_lost=5))
    back = [j.job_id for j in first + second]
    assert sorted(back) == sorted(c.job.job_id for c in taken)
    assert all(j.state == "queued" and j.lost_leases == 1 for j in first + second)
    again = await b.claim_batch("node-b:w", 30.0, 1 << 30, ["test"], 30)
    assert {c.job.attempt for c in again} == {2} and len(again) == 30


async def test_migrations_run_once_and_a_newer_schema_is_refused(postgres_dsn):
    stores = [PostgresStore(postgres_dsn) for _ in range(4)]
    versions = await asyncio.gather(*(s.migrate() for s in stores))
    latest = migrations("sql/postgres")[-1][0]
    assert set(versions) == {latest}
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall() \
            == [(v,) for v in range(1, latest + 1)]
        conn.execute("INSERT INTO schema_version (version) VALUES (99)")
    with pytest.raises(StoreUnavailable, match="version 99"):
        await PostgresStore(postgres_dsn).open()


async def test_a_store_that_cannot_be_reached_is_unavailable(tmp_path):
    store = PostgresStore(f"host={tmp_path} dbname=none user=none", connect_timeout_s=2)
    with pytest.raises(StoreUnavailable):
        await store.open()



async def test_a_deadlock_between_the_daemons_reruns_the_batch(daemons, postgres_dsn):
    # node-a records signature key k1 then k2 in one transaction, node-b k2 then k1:
    # each waits for the key the other holds, PostgreSQL aborts one of the two, and
    # that writer runs its batch again, which then finds the other's record.
    a, b = daemons
    holding = threading.Barrier(2, timeout=30)
    job, _ = await a.admit(new_job("dl"), actor="api:t1", max_queue_depth=100)

    def op(first: str, second: str):
        runs = []

        def run(tx):  # on the writer's thread
            runs.append(1)
            got = [tx.run("put_signature", tenant="t1", sig_key=first, artifact_id=first,
                                sha256="0" * 64, size=1, job_id=job.job_id, now=tx.now)]
            if len(runs) == 1:
                holding.wait()  # both hold their first key
            got.append(tx.run("put_signature", tenant="t1", sig_key=second,
                                    artifact_id=second, sha256="0" * 64, size=1,
                                    job_id=job.job_id, now=tx.now))
            tx.event(job, "note", "test", {"got": got})
            return got

        return run

    got_a, got_b = await asyncio.wait_for(
        asyncio.gather(a._write(op("k1", "k2")), b._write(op("k2", "k1"))), 60)
    # (The rerun may meet the survivor once more, before it committed, and rerun again.)
    assert a.reruns + b.reruns >= 1
    # The survivor recorded both keys; the rerun found both recorded.
    assert sorted([got_a, got_b]) == [[0, 0], [1, 1]]
    verified(postgres_dsn)


def test_the_cli_migrates_and_verifies_a_postgres_store(postgres_dsn, tmp_path, capsys):
    from casesignd.cli import commands as cli

    config = tmp_path / "config.toml"
    config.write_text(f'[store]\nkind = "postgres"\ndsn = "{postgres_dsn}"\n')
    assert cli.main(["store", "migrate", "--config", str(config)]) == 0
    latest = migrations("sql/postgres")[-1][0]
    assert capsys.readouterr().out == f"job store postgres {postgres_dsn}: schema version {latest}\n"

    async def write() -> None:
        store = PostgresStore(postgres_dsn)
        await store.open()
        job, _ = await store.admit(new_job("cli"), actor="api:t1", max_queue_depth=10)
        claimed = await store.claim("node-a:w", 10.0, 1 << 30, ["test"])
        await store.conclude(claimed.lease, Finish())
        await store.close()

    asyncio.run(write())
    assert cli.main(["audit", "verify", "--config", str(config)]) == 0
    assert capsys.readouterr().out == "audit chain intact: 3 events\n"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # Someone with the database's owner rights rewrites history around the trigger.
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute("UPDATE events SET actor = 'someone else' WHERE seq = 2")
    assert cli.main(["audit", "verify", "--config", str(config)]) == 1
    assert capsys.readouterr().out.startswith("audit chain broken at event seq=2 ")
    config.write_text(f'[store]\nkind = "postgres"\ndsn = "host={tmp_path} dbname=none"\n')
    assert cli.main(["store", "migrate", "--config", str(config)]) == 1
    assert "error: store_unavailable: the job store cannot be reached" in capsys.readouterr().err


async def test_a_claim_reads_the_queue_by_its_index_on_a_table_never_analyzed(postgres_dsn):
    # A queue planned from statistics taken when it was small reads every queued row
    # (a bitmap scan, then a sort) on each claim; the writer plans by the index.
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        await asyncio.gather(*(store.admit(new_job(f"p{i}"), actor="api:t1", max_queue_depth=5000)
                               for i in range(2000)))

        def plan(tx):
            rows = tx.conn.execute("EXPLAIN " + tx.q["claim_batch"], {
                "owner": "w", "now": tx.now, "lease_s": 30.0, "budget": 1 << 40,
                "kinds": ["test"], "limit": 4, "skip": [], **store.turns.known()}).fetchall()
            return "\n".join(r["QUERY PLAN"] for r in rows)

        text = await store._write(plan)
        # The gauges' read, four times a second, on a reading connection.
        async with store._pool.connection() as conn:
            rows = await (await conn.execute("EXPLAIN " + store.q["oldest_queued"])).fetchall()
        gauge = "\n".join(r["QUERY PLAN"] for r in rows)
    finally:
        await store.close()
    # Each tenant's lane is one range of jobs_fair (casesignd.store.claims).
    assert "using jobs_fair on jobs" in text and "Bitmap" not in text, text
    assert "Index Scan" in gauge and "Seq Scan" not in gauge, gauge


async def test_steps_sent_together_keep_their_order_and_their_failures_apart(postgres_dsn):
    # Consecutive admissions, claims and ends of attempts go to the server together
    # (pipeline mode). A statement that fails among them is told from the others:
    # only its caller hears of it, and the rest commit, in order.
    from casesignd.store.postgres_writer import Step

    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        bad = Step(lambda tx: ("admit_job", {**new_job("bad").__dict__, "tenant": None,
                                             "job_id": "job_bad", "now": tx.now,
                                             "max_queue_depth": 100, "waiting_pending": 0,
                                             "admission_ms": 0.0}),
                   lambda tx, rows: rows)
        # Hold the writer in a batch of its own, so that the four queue up behind it
        # and make the next batch together.
        gate = threading.Event()
        held = asyncio.ensure_future(store._write(lambda tx: gate.wait(10)))
        await asyncio.sleep(0.1)
        batches = store.commit_batches
        together = asyncio.gather(
            store.admit(new_job("s1"), actor="api:t1", max_queue_depth=100),
            store.claim("node-a:w", 30.0, 1 << 30, ["test"]),
            store._write(bad),
            store.admit(new_job("s2"), actor="api:t1", max_queue_depth=100),
            return_exceptions=True)
        await asyncio.sleep(0.1)
        gate.set()
        await held
        first, claimed, failed, last = await together
        assert store.commit_batches - batches == 2
        assert isinstance(failed, StoreUnavailable) and "null value" in failed.detail["postgres"]
        assert first[1] and last[1]
        # The claim ran after the admission before it, in the batch's order.
        assert claimed is not None and claimed.job_id == first[0].job_id
        done = await store.conclude(claimed.lease, Finish())
        assert done.state == "succeeded"
    finally:
        await store.close()
    verified(postgres_dsn)


async def test_a_second_live_daemon_of_one_node_name_is_refused(postgres_dsn):
    first = PostgresStore(postgres_dsn, node="node-a")
    await first.open()
    other = PostgresStore(postgres_dsn, node="node-b")
    await other.open()  # another name is welcome
    with pytest.raises(StoreUnavailable, match="node-a") as refused:
        await PostgresStore(postgres_dsn, node="node-a").open()
    assert refused.value.detail["reason"] == "node_taken"
    await first.close()  # its session, and the name with it, is gone
    again = PostgresStore(postgres_dsn, node="node-a")
    await again.open()
    await again.ping()
    for s in (other, again):
        await s.close()


async def test_a_node_name_lost_with_its_session_is_taken_again_by_the_next_ping(postgres_dsn):
    store = PostgresStore(postgres_dsn, node="node-a")
    await store.open()
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks"
                      " WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()")
    await asyncio.sleep(0.2)
    await store.ping()  # the name is held again
    with pytest.raises(StoreUnavailable, match="node-a"):
        await PostgresStore(postgres_dsn, node="node-a").open()
    await store.close()


async def test_a_node_takes_back_only_its_own_leases_at_start(daemons):
    a, b = daemons
    for i in range(4):
        await a.admit(new_job(f"n{i}"), actor="api:t1", max_queue_depth=100)
    mine = await a.claim_batch("node-a:100:aa", 600.0, 1 << 30, ["test"], 2)
    theirs = await b.claim_batch("node-b:200:bb", 600.0, 1 << 30, ["test"], 2)
    back = await a.reclaim_expired(max_lost=5, at_start_of="node-a")
    assert sorted(j.job_id for j in back) == sorted(c.job.job_id for c in mine)
    assert all(j.state == "queued" for j in back)
    # node-b's leases are node-b's until they expire, and a name is matched whole.
    assert await a.reclaim_expired(max_lost=5, at_start_of="node") == []
    assert await b.renew([c.job.lease for c in theirs], 600.0) == []  # none lost


async def test_with_notify_a_node_hears_of_jobs_another_queued_and_a_burst_is_folded(postgres_dsn):
    listener = PostgresStore(postgres_dsn, node="node-a", notify=True)
    sender = PostgresStore(postgres_dsn, node="node-b", notify=True)
    quiet = PostgresStore(postgres_dsn, node="node-c")  # polls: announces nothing
    for s in (listener, sender, quiet):
        await s.open()
    woken = asyncio.Event()
    listener.on_announce(woken.set)
    quiet.announce()
    for i in range(50):  # a burst of admissions
        await sender.admit(new_job(f"w{i}"), actor="api:t1", max_queue_depth=100)
        sender.announce()
    await asyncio.wait_for(woken.wait(), 10)
    assert 1 <= sender._announcer.sent < 50
    for s in (listener, sender, quiet):
        await s.close()

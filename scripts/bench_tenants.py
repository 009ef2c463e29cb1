"""Tenants benchmark: does one tenant's backlog hold another's jobs back, and does a
claim cost more as the backlog grows?

    scripts/bench tenants [--backlog N] [--jobs-b N] [--process-ms MS] [--workers N]
                          [--store sqlite|postgres|both]

1. Queue wait. Tenant a queues ``--backlog`` jobs (10,000); ``--workers`` consumers
   claim, "process" each job for ``--process-ms`` and finish it through the store;
   once they are under way, tenant b posts ``--jobs-b`` jobs, one every other
   processing time. b's queue waits (the store's own ``queue_wait_ms``, admission to
   claim) are measured three ways in the same run, each on a fresh store: b alone
   (no backlog), b beside a's backlog with casesignd's claims (tenants take turns),
   and b beside a's backlog with the claim order before turns (f8d5a34's: the oldest
   due job of any tenant, kept here as its statement).
2. Claim cost. A store holding 100, 10,000 and 100,000 queued jobs of one tenant (and
   a few of four others): the median and p99 time of one claim (the statement and its
   commit), with turns and first-in-first-out.

The target: b's p99 queue wait under twice one job's processing time at any backlog,
and a flat claim cost. With ``--store postgres`` (or ``both``) the same runs go through
the PostgreSQL store on a throwaway cluster in the same directory, which syncs its WAL
at every commit as SQLite does. The table ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import loadavg  # noqa: E402  (scripts/, beside this file)

from casesignd.core import audit  # noqa: E402
from casesignd.core.hashing import sha256_hex  # noqa: E402
from casesignd.core.outcomes import Finish  # noqa: E402
from casesignd.engine import jobs  # noqa: E402
from casesignd.store import Job, NewJob, SqliteStore, row_job  # noqa: E402
from casesignd.store.verbs import claimed, job_of  # noqa: E402

KIND = "noop"
ALL_BYTES = 1 << 40
LEASE_S = 60.0

# The claim before tenants took turns (f8d5a34), kept as data for the comparison.
FIFO_SQLITE = """
UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_owner = :owner,
       lease_expires = :now + :lease_s, claimed_at = :now,
       first_claimed_at = coalesce(first_claimed_at, :now),
       queue_wait_ms = queue_wait_ms + max(0, (:now - coalesce(queued_since, :now)) * 1000.0),
       queued_since = NULL, updated_at = :now
 WHERE job_id = (SELECT job_id FROM jobs
                  WHERE state = 'queued' AND next_attempt_at <= :now
                    AND declared_bytes <= :budget AND kind IN (SELECT value FROM json_each(:kinds))
                  ORDER BY next_attempt_at, job_id LIMIT 1)
RETURNING *"""
FIFO_POSTGRES = """
WITH candidate AS MATERIALIZED (
  SELECT job_id FROM jobs
   WHERE state = 'queued' AND next_attempt_at <= %(now)s::float8
     AND declared_bytes <= %(budget)s::bigint AND kind = ANY(%(kinds)s::text[])
   ORDER BY next_attempt_at, job_id LIMIT 1
   FOR UPDATE SKIP LOCKED)
UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, lease_owner = %(owner)s,
       lease_expires = %(now)s::float8 + %(lease_s)s::float8, claimed_at = %(now)s::float8,
       first_claimed_at = coalesce(jobs.first_claimed_at, %(now)s::float8),
       queue_wait_ms = jobs.queue_wait_ms
         + greatest(0, (%(now)s::float8 - coalesce(jobs.queued_since, %(now)s::float8)) * 1000.0),
       queued_since = NULL, updated_at = %(now)s::float8
  FROM candidate WHERE jobs.job_id = candidate.job_id
RETURNING jobs.*"""


def fifo_claim(store: Any, postgres: bool) -> Callable[[str], Any]:
    """A claim of ``store`` in the order before turns: ``claim(owner) -> Job | None``."""
    store.q["claim_fifo"] = FIFO_POSTGRES if postgres else FIFO_SQLITE
    kinds = [KIND] if postgres else json.dumps([KIND])

    def op(tx: Any, owner: str) -> Job | None:
        row = tx.one("claim_fifo", owner=owner, now=tx.now, lease_s=LEASE_S,
                     budget=ALL_BYTES, kinds=kinds)
        return None if row is None else claimed(tx, job_of(row) if postgres else row_job(row),
                                                owner)

    async def claim(owner: str) -> Job | None:
        return await store._write(lambda tx: op(tx, owner))

    return claim


def turns_claim(store: Any) -> Callable[[str], Any]:
    async def claim(owner: str) -> Job | None:
        got = await store.claim_batch(owner, LEASE_S, ALL_BYTES, [KIND], 1)
        return got[0].job if got else None

    return claim


def new_job(tenant: str, i: int) -> NewJob:
    body = {"i": i}
    raw = audit.canonical(body)
    return NewJob(tenant=tenant, kind=KIND, case_id=None, idem_key=f"key:{tenant}-{i}",
                  fingerprint=jobs.fingerprint(KIND, body), input=raw.decode(),
                  input_digest=sha256_hex(raw), version="v1", declared_bytes=0,
                  created_at=time.time(), correlation_id="bench")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- 1. queue wait ------------------------------------------------------------------------


async def queue_wait(make: Callable[[], Any], postgres: bool, order: str, backlog: int,
                     jobs_b: int, process_s: float, workers: int) -> dict[str, float]:
    """b's queue waits (ms) beside ``backlog`` jobs of a, claimed in ``order``."""
    store = make()
    await store.open()
    try:
        for start in range(0, backlog, 64):
            await asyncio.gather(*(store.admit(new_job("a", i), actor="api:a",
                                               max_queue_depth=backlog + jobs_b + 1)
                                   for i in range(start, min(backlog, start + 64))))
        claim = fifo_claim(store, postgres) if order == "fifo" else turns_claim(store)
        waits: list[float] = []
        a_done = 0
        under_way = asyncio.Event()

        async def worker(w: int) -> None:
            nonlocal a_done
            # Staggered, as a pool's workers are once under way: not all in step.
            await asyncio.sleep(w * process_s / workers)
            while len(waits) < jobs_b:
                job = await claim(f"w{w}")
                if job is None:
                    await asyncio.sleep(0.001)
                    continue
                if job.tenant == "b":
                    waits.append(job.queue_wait_ms)
                await asyncio.sleep(process_s)
                await store.conclude(job.lease, Finish())
                if job.tenant == "a":
                    a_done += 1
                    if a_done >= 2 * workers:
                        under_way.set()

        async def tenant_b() -> None:
            if backlog:
                await under_way.wait()
            for i in range(jobs_b):
                await store.admit(new_job("b", i), actor="api:b", max_queue_depth=backlog + jobs_b + 1)
                await asyncio.sleep(2 * process_s)

        t0 = time.perf_counter()
        await asyncio.gather(tenant_b(), *(worker(w) for w in range(workers)))
        return {"p50_ms": pct(waits, 50), "p99_ms": pct(waits, 99), "max_ms": max(waits),
                "a_done": a_done, "seconds": time.perf_counter() - t0}
    finally:
        await store.close()


# --- 2. claim cost ------------------------------------------------------------------------

_BULK_SQLITE = """
INSERT INTO jobs (job_id, tenant, kind, idem_key, fingerprint, input, input_digest, version,
                  state, created_at, admitted_at, queued_since, next_attempt_at,
                  correlation_id, updated_at)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
SELECT printf('job_%s_%09d', :tenant, i), :tenant, 'noop', 'key:' || i, 'f', '{}', 'd', 'v1',
       'queued', :now, :now, :now, :now + i * 1e-6, 'bench', :now FROM n"""
_BULK_POSTGRES = """
INSERT INTO jobs (job_id, tenant, kind, idem_key, fingerprint, input, input_digest, version,
                  state, created_at, admitted_at, queued_since, next_attempt_at,
                  correlation_id, updated_at)
SELECT format('job_%%s_%%s', %(tenant)s::text, lpad(i::text, 9, '0')), %(tenant)s, 'noop',
       'key:' || i, 'f', '{}', 'd', 'v1', 'queued', %(now)s, %(now)s, %(now)s,
       %(now)s + i * 1e-6, 'bench', %(now)s
  FROM generate_series(1, %(count)s) AS i"""
# One tenant with the backlog, four with a few jobs each.
SHAPE = [("a", None), ("b", 10), ("c", 10), ("d", 10), ("e", 10)]


def fill(where: str, postgres: bool, backlog: int) -> None:
    """``backlog`` queued jobs of a (and a few of others), written in bulk."""
    now = time.time() - 1
    rows = [(t, backlog if n is None else n) for t, n in SHAPE]
    if postgres:
        import psycopg

        with psycopg.connect(where) as conn:
            for tenant, count in rows:
                conn.execute(_BULK_POSTGRES, {"tenant": tenant, "count": count, "now": now})
            conn.execute("UPDATE job_counts SET n = n + %s WHERE state = 'queued'",
                         (sum(c for _, c in rows),))
            conn.execute("ANALYZE jobs")
        return
    with contextlib.closing(sqlite3.connect(where)) as conn, conn:
        for tenant, count in rows:
            conn.execute(_BULK_SQLITE, {"tenant": tenant, "count": count, "now": now})


async def claim_cost(make: Callable[[], Any], where: str, postgres: bool, backlog: int,
                     claims: int) -> dict[str, dict[str, float]]:
    """The time of one claim (ms) with ``backlog`` queued: with turns, and FIFO."""
    store = make()
    await store.open()  # the schema
    await store.close()
    fill(where, postgres, backlog)
    store = make()
    await store.open()
    out = {}
    claims = min(claims, backlog // 2)  # both orders claim from the same backlog
    try:
        for order, claim in (("turns", turns_claim(store)), ("fifo", fifo_claim(store, postgres))):
            took = []
            for _ in range(claims):
                t0 = time.perf_counter()
                assert await claim("w") is not None
                took.append((time.perf_counter() - t0) * 1000.0)
            out[order] = {"p50_ms": statistics.median(took), "p99_ms": pct(took, 99)}
    finally:
        await store.close()
    return out


# --- the runs -----------------------------------------------------------------------------


@contextlib.contextmanager
def stores(which: str, directory: Path) -> Iterator[list[tuple[str, Callable[[str], Any]]]]:
    """(name, fresh) for each store asked for: ``with fresh(label) as (make, where)``, a
    fresh store (a file, or a database) and where its rows are."""
    out: list[tuple[str, Callable[[str], Any]]] = []
    if which in ("sqlite", "both"):
        @contextlib.contextmanager
        def fresh_sqlite(label: str) -> Iterator[tuple[Callable[[], Any], str]]:
            path = directory / f"{label}.db"
            yield (lambda: SqliteStore(path)), str(path)

        out.append(("sqlite", fresh_sqlite))
    cluster_cm: Any = contextlib.nullcontext()
    if which in ("postgres", "both"):
        from tests.pgcluster import running_cluster

        directory.chmod(0o711)  # the server runs as postgres and must reach its directory
        cluster_cm = running_cluster(fsync=True, parent=str(directory))
    with cluster_cm as cluster:
        if cluster is not None:
            from casesignd.store.postgres import PostgresStore

            @contextlib.contextmanager
            def fresh_postgres(label: str) -> Iterator[tuple[Callable[[], Any], str]]:
                with cluster.fresh_database() as dsn:
                    yield (lambda: PostgresStore(dsn)), dsn

            out.append(("postgres", fresh_postgres))
        yield out


def rounded(value: Any) -> Any:
    """``value`` with its floats to three decimals (the JSON line)."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--jobs-b", type=int, default=20)
    ap.add_argument("--process-ms", type=float, default=50.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--claims", type=int, default=200, help="claims timed per backlog")
    ap.add_argument("--backlogs", default="100,10000,100000")
    ap.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    args = ap.parse_args()
    load0 = loadavg.snapshot()
    figures: dict[str, Any] = {"process_ms": args.process_ms, "workers": args.workers,
                               "backlog": args.backlog, "jobs_b": args.jobs_b}
    process_s = args.process_ms / 1000.0
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as tmp, \
            stores(args.store, Path(tmp)) as engines:
        for name, fresh in engines:
            postgres = name == "postgres"
            waits = {}
            for label, order, backlog in (("b alone", "turns", 0), ("turns", "turns", args.backlog),
                                          ("fifo", "fifo", args.backlog)):
                with fresh(f"wait-{order}-{backlog}") as (make, _):
                    waits[label] = asyncio.run(queue_wait(make, postgres, order, backlog,
                                                          args.jobs_b, process_s, args.workers))
            costs = {}
            for backlog in (int(b) for b in args.backlogs.split(",")):
                with fresh(f"cost-{backlog}") as (make, where):
                    costs[backlog] = asyncio.run(claim_cost(make, where, postgres, backlog,
                                                            args.claims))
            figures[name] = {"queue_wait": waits, "claim_cost": costs}
    load1 = loadavg.snapshot()

    print(f"tenant b's queue wait, {args.jobs_b} jobs posted while tenant a's "
          f"{args.backlog:,}-job backlog drains ({args.workers} workers, "
          f"{args.process_ms:g} ms a job)")
    print(f"{'store':<10} {'claims':<28} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'a done':>8}")
    for name in ("sqlite", "postgres"):
        for label, r in figures.get(name, {}).get("queue_wait", {}).items():
            print(f"{name:<10} {label:<28} {r['p50_ms']:>9.1f} {r['p99_ms']:>9.1f} "
                  f"{r['max_ms']:>9.1f} {r['a_done']:>8}")
    print()
    print(f"one claim's time (statement and commit), {args.claims} claims, by queued backlog")
    print(f"{'store':<10} {'backlog':>9} {'turns p50':>10} {'turns p99':>10} "
          f"{'fifo p50':>10} {'fifo p99':>10}")
    for name in ("sqlite", "postgres"):
        for backlog, r in figures.get(name, {}).get("claim_cost", {}).items():
            print(f"{name:<10} {backlog:>9,} {r['turns']['p50_ms']:>10.2f} "
                  f"{r['turns']['p99_ms']:>10.2f} {r['fifo']['p50_ms']:>10.2f} "
                  f"{r['fifo']['p99_ms']:>10.2f}")
    print()
    target = 2 * args.process_ms
    met = {name: figures[name]["queue_wait"]["turns"]["p99_ms"] < target
           for name in ("sqlite", "postgres") if name in figures}

    def flat(name: str) -> float:
        cost = figures[name]["claim_cost"]
        return max(c["turns"]["p50_ms"] for c in cost.values()) / \
            min(c["turns"]["p50_ms"] for c in cost.values())

    spread = {name: round(flat(name), 2) for name in ("sqlite", "postgres") if name in figures}
    print(f"target: b's p99 under {target:g} ms (twice a job) with turns: {met}; "
          f"claim cost, largest p50 over smallest across backlogs: {spread}")
    print(loadavg.describe(load0, load1))
    print(json.dumps(rounded({**figures, "b_p99_under_2x_job": met,
                              "claim_cost_spread": spread})))


if __name__ == "__main__":
    main()

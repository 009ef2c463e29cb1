"""Queue benchmark: no-op jobs through casesignd's durable engine against huey's
SqliteHuey, and admission latency over HTTP at a fixed request rate.

    scripts/bench queue [--jobs N] [--rate RPS] [--seconds S] [--store postgres] [--repeat N]

Both queues run on a file on the same disk. casesignd's figure includes everything a
job costs in production: the job row, the claim with its lease, the finish, and one
hash-chained audit event per transition, committed with synchronous=FULL.

With ``--store postgres`` the same jobs also run through the PostgreSQL store and
through procrastinate (scripts/benchlib/procrastinate_queue.py, in its own database), on one
throwaway cluster in the same directory (so on the same disk) that syncs its WAL at
every commit as SQLite does (fsync and synchronous_commit on), with the same number
of consumers; the table gives the PostgreSQL store's rate beside SQLite's (the
target: at least half of it) and beside procrastinate's. ``--repeat N`` runs each
engine N times, taking turns with the others, and shows each one's median run: on a
shared machine the load moves. The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import loadavg  # noqa: E402  (scripts/, beside this file)

from casesignd.core import audit  # noqa: E402
from casesignd.core.hashing import sha256_hex  # noqa: E402
from casesignd.core.outcomes import Finish  # noqa: E402
from casesignd.engine import jobs  # noqa: E402
from casesignd.store import NewJob, SqliteStore  # noqa: E402


async def casesignd_engine(n: int, workers: int, directory: Path,
                           make: Callable[[], Any] | None = None,
                           verify: Callable[[], audit.AuditReport] | None = None) -> dict[str, float]:
    """``n`` no-op jobs admitted, claimed and finished by ``workers`` consumers, on the
    SQLite store in ``directory`` or on the store ``make`` builds."""
    store = make() if make is not None else SqliteStore(directory / "bench.db")
    await store.open()
    done = asyncio.Event()
    finished = 0

    def new(i: int) -> NewJob:
        body = {"i": i}
        raw = audit.canonical(body)
        return NewJob(tenant="bench", kind="noop", case_id=None, idem_key=f"key:{i}",
                      fingerprint=jobs.fingerprint("noop", body), input=raw.decode(),
                      input_digest=sha256_hex(raw), version="v1", declared_bytes=0,
                      created_at=time.time(), correlation_id="bench")

    work = asyncio.Event()

    async def producer() -> None:
        batch = 64
        for start in range(0, n, batch):
            await asyncio.gather(*(store.admit(new(i), actor="api:bench", max_queue_depth=n + 1)
                                   for i in range(start, min(n, start + batch))))
            work.set()

    async def worker(w: int) -> None:
        # Like the pool's dispatcher: an empty claim waits for a wake-up, it does not spin.
        nonlocal finished
        while not done.is_set():
            job = await store.claim(f"w{w}", 30.0, 1 << 40, ["noop"])
            if job is None:
                work.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(work.wait(), 0.05)
                continue
            await store.conclude(job.lease, Finish())
            finished += 1
            if finished >= n:
                done.set()

    t0 = time.perf_counter()
    await asyncio.gather(producer(), *(worker(w) for w in range(workers)))
    took = time.perf_counter() - t0
    batches = store.commit_batches
    await store.close()
    report = verify() if verify is not None else audit.verify_file(directory / "bench.db")
    assert report.ok and report.checked == 3 * n, report
    return {"jobs_per_s": n / took, "seconds": took, "commits": batches, "events": report.checked}


# The engines of a run with --store postgres, besides casesignd on SQLite.
POSTGRES_ENGINES = ("postgres", "procrastinate", "procrastinate_workers")


def engines(n: int, counts: list[int], repeat: int, directory: Path, postgres: bool
            ) -> dict[str, dict[int, dict[str, float]]]:
    """Each engine's median run by rate, per consumers count: casesignd on SQLite and,
    with ``postgres``, casesignd's PostgreSQL store and procrastinate (both forms) on
    one throwaway cluster, a fresh database each run. The engines take turns, so that
    a change in the machine's load falls on all of them."""
    names = ("sqlite", *POSTGRES_ENGINES) if postgres else ("sqlite",)
    runs: dict[str, dict[int, list[dict[str, float]]]] = {e: {w: [] for w in counts} for e in names}
    cluster_cm: Any = contextlib.nullcontext()
    if postgres:
        from tests.pgcluster import running_cluster

        directory.chmod(0o711)  # the server runs as postgres and must reach its directory
        cluster_cm = running_cluster(fsync=True, parent=str(directory))
    with cluster_cm as cluster:
        for i in range(repeat):
            for w in counts:
                for name in names:
                    runs[name][w].append(_one_run(name, n, w, directory / f"{name}-{w}-{i}", cluster))

    def median(runs: list[dict[str, float]]) -> dict[str, float]:
        return sorted(runs, key=lambda r: r["jobs_per_s"])[len(runs) // 2]

    return {e: {w: median(r) for w, r in by_w.items()} for e, by_w in runs.items()}


def _one_run(engine: str, n: int, workers: int, directory: Path, cluster: Any) -> dict[str, float]:
    """One run of ``engine``: SQLite in ``directory``, the others on a fresh database."""
    if engine == "sqlite":
        directory.mkdir()
        return asyncio.run(casesignd_engine(n, workers, directory))
    with cluster.fresh_database() as dsn:
        if engine == "postgres":
            from casesignd.store.postgres import PostgresStore

            return asyncio.run(casesignd_engine(n, workers, directory,
                                                make=lambda: PostgresStore(dsn),
                                                verify=lambda: audit.verify_postgres(dsn)))
        from benchlib import procrastinate_queue

        return asyncio.run(procrastinate_queue.run(
            n, workers, dsn, separate_workers=engine == "procrastinate_workers"))


def huey_sqlite(n: int, directory: Path) -> dict[str, float]:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=str(directory / "huey.db"), results=True)

    @huey.task()
    def noop(i: int) -> int:
        return i

    t0 = time.perf_counter()
    for i in range(n):
        noop(i)
    ran = 0
    while ran < n:
        task = huey.dequeue()
        if task is None:
            break
        huey.execute(task)
        ran += 1
    took = time.perf_counter() - t0
    assert ran == n
    return {"jobs_per_s": n / took, "seconds": took}


async def http_admission(rate: float, seconds: float, directory: Path) -> dict[str, float]:
    import aiohttp

    from tests.daemon import Daemon

    d = Daemon(directory / "daemon", {"workers": {"concurrency": 8, "max_queue_depth": 1_000_000},
                                      "logging": {"level": "warning"}},
               strict_labels=False)
    d.start()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    try:
        total = int(rate * seconds)
        headers = {"Authorization": f"Bearer {d.token}"}
        conn = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=conn, headers=headers) as session:
            async def one(i: int, due: float) -> None:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                start = due  # open loop: a late send counts against the server
                async with session.post(f"{d.url}/v1/jobs",
                                        json={"kind": "test", "tag": f"bench-{i}"}) as r:
                    await r.read()
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                latencies.append((time.perf_counter() - start) * 1000)

            t0 = time.perf_counter() + 0.2
            await asyncio.gather(*(one(i, t0 + i / rate) for i in range(total)))
    finally:
        d.stop()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return {"rate_rps": rate, "requests": len(latencies), "p50_ms": q[49], "p99_ms": q[98],
            "max_ms": latencies[-1], "accepted": statuses.get(202, 0)}


def _pg_rows(figures: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    """The table's rows of the PostgreSQL engines, per consumers count."""
    sqlite = figures["sqlite"]
    rows = []
    for w, r in figures.get("postgres", {}).items():
        vs = r["jobs_per_s"] / sqlite[w]["jobs_per_s"]
        best = max(figures["procrastinate"][w]["jobs_per_s"],
                   figures["procrastinate_workers"][w]["jobs_per_s"])
        rows.append(f"{f'casesignd engine on PostgreSQL, {w} consumers':<44} "
                    f"{r['jobs_per_s']:>10.0f} {r['seconds']:>9.2f}  {r['events']} audit events "
                    f"in {r['commits']} commits, {vs:.2f}x SQLite (target 0.5: "
                    f"{'met' if vs >= 0.5 else 'MISSED'}), {r['jobs_per_s'] / best:.2f}x "
                    f"procrastinate's best")
        for engine, label in (("procrastinate", f"procrastinate, 1 worker x {w} concurrency"),
                              ("procrastinate_workers", f"procrastinate, {w} workers x 1")):
            p = figures[engine][w]
            rows.append(f"{label:<44} {p['jobs_per_s']:>10.0f} {p['seconds']:>9.2f}  "
                        f"{p['events']} event rows, no hash chain")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--workers", default="8,32",
                    help="concurrent consumers claiming and finishing jobs (a comma list)")
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite",
                    help="postgres: run the jobs through the PostgreSQL store and "
                         "procrastinate as well")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each engine, taking turns; the median is shown")
    args = ap.parse_args()
    load0 = loadavg.snapshot()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", str(ROOT))) as tmp:
        base = Path(tmp)
        (base / "b").mkdir()
        counts = [int(w) for w in args.workers.split(",")]
        figures = engines(args.jobs, counts, max(1, args.repeat), base, args.store == "postgres")
        huey = huey_sqlite(args.jobs, base / "b")
        adm = asyncio.run(http_admission(args.rate, args.seconds, base))
    load1 = loadavg.snapshot()
    ours, pg = figures["sqlite"], figures.get("postgres", {})
    ratio = {w: r["jobs_per_s"] / huey["jobs_per_s"] for w, r in ours.items()}
    print(f"{'queue':<44} {'jobs/s':>10} {'seconds':>9}  notes")
    for w, r in ours.items():
        print(f"{f'casesignd engine, {w} consumers (durable)':<44} {r['jobs_per_s']:>10.0f} "
              f"{r['seconds']:>9.2f}  {r['events']} audit events in {r['commits']} commits, "
              f"{ratio[w]:.2f}x huey")
    for row in _pg_rows(figures):
        print(row)
    print(f"{'huey SqliteHuey (enqueue + execute)':<44} {huey['jobs_per_s']:>10.0f} "
          f"{huey['seconds']:>9.2f}  synchronous=FULL (SQLite default), no audit trail")
    print()
    print(f"{args.jobs} no-op jobs a run, the median of {max(1, args.repeat)} runs each; "
          "casesignd's audit trail on (hash-chained, verified after each run)")
    print(f"admission over HTTP at {adm['rate_rps']:.0f} req/s, {adm['requests']} requests: "
          f"p50 {adm['p50_ms']:.2f} ms, p99 {adm['p99_ms']:.2f} ms, max {adm['max_ms']:.2f} ms, "
          f"{adm['accepted']} accepted")
    print(loadavg.describe(load0, load1))
    vs_sqlite = {str(w): round(r["jobs_per_s"] / ours[w]["jobs_per_s"], 2) for w, r in pg.items()}

    def rates(engine: str) -> dict[str, float]:
        return {str(w): round(r["jobs_per_s"], 1) for w, r in figures.get(engine, {}).items()}

    print(json.dumps({
        "jobs": args.jobs,
        "repeat": max(1, args.repeat),
        "casesignd_jobs_per_s": rates("sqlite"),
        "postgres_jobs_per_s": rates("postgres"),
        "postgres_vs_sqlite": vs_sqlite,
        "postgres_within_2x_of_sqlite": all(x >= 0.5 for x in vs_sqlite.values()) if pg else None,
        "procrastinate_jobs_per_s": {"one_worker": rates("procrastinate"),
                                     "workers": rates("procrastinate_workers")} if pg else {},
        "huey_jobs_per_s": round(huey["jobs_per_s"], 1),
        "ratio": {str(w): round(x, 2) for w, x in ratio.items()},
        "commits": {str(w): r["commits"] for w, r in ours.items()},
        "admission_rate_rps": adm["rate_rps"],
        "admission_p50_ms": round(adm["p50_ms"], 3),
        "admission_p99_ms": round(adm["p99_ms"], 3),
        "admission_max_ms": round(adm["max_ms"], 3),
        "admission_requests": adm["requests"],
        "load_average": {"start": load0, "end": load1},
    }))


if __name__ == "__main__":
    main()

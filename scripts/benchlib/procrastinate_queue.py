"""procrastinate, the PostgreSQL job queue for Python, on the queue benchmark's no-op
workload: what scripts/bench_queue.py compares casesignd's PostgreSQL store with.

``n`` no-op jobs are deferred in batches of 64 (``batch_defer_async``, one INSERT a
batch) while ``consumers`` run them, on procrastinate's own schema in its own
database of the same cluster, in one of the two forms its documentation gives:
one worker of that ``concurrency`` (one fetch loop, jobs run side by side), or that
many workers of concurrency 1 in the process (a fetch loop each). The pool holds a
connection for every job in flight and for every worker's fetch loop and LISTEN, so
that no job waits for a connection. The clock stops when the workers have written
the last job's outcome; the jobs' rows are then counted. procrastinate keeps a row
per job and an event row per transition (written by its triggers), with no hash
chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

BATCH = 64


async def run(n: int, consumers: int, dsn: str, *, separate_workers: bool = False
              ) -> dict[str, float]:
    """The figures of one run on the empty database at ``dsn``: one worker of
    concurrency ``consumers``, or with ``separate_workers`` that many workers."""
    import procrastinate
    import psycopg

    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    workers, concurrency = (consumers, 1) if separate_workers else (1, consumers)
    pool_size = consumers + 2 * workers
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=dsn, min_size=pool_size, max_size=pool_size))
    ran = 0
    all_ran = asyncio.Event()

    @app.task(name="noop")
    async def noop(i: int) -> int:
        nonlocal ran
        ran += 1
        if ran >= n:
            all_ran.set()
        return i

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        running = [asyncio.create_task(app.run_worker_async(
            concurrency=concurrency, install_signal_handlers=False, name=f"bench-{k}"))
            for k in range(workers)]
        for start in range(0, n, BATCH):
            await noop.batch_defer_async(*({"i": i} for i in range(start, min(n, start + BATCH))))
        await all_ran.wait()
        # Cancelling stops a worker gracefully: it waits for its outcomes to be written.
        for worker in running:
            worker.cancel()
        for worker in running:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        took = time.perf_counter() - t0
    with psycopg.connect(dsn) as conn:
        succeeded, events = conn.execute(
            "SELECT (SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'),"
            " (SELECT count(*) FROM procrastinate_events)").fetchone() or (0, 0)
    assert succeeded == n, (succeeded, n)
    return {"jobs_per_s": n / took, "seconds": took, "events": events}

"""Signing end to end through 1, 2, 3... daemons on one PostgreSQL database, beside the
single daemon on SQLite, in the same run:

    scripts/bench sign --store postgres [--nodes 1,2,3] [--jobs N] [--repeat R] [--dir DIR]

Each run is one-page ``sign_case`` jobs, each a fresh signature, submitted over HTTP by
the bench client of scripts/benchlib/e2e.py (32 submitters on kept-alive connections), its
submitters spread round-robin over the daemons' ports, and polled until every job
is ready. With PostgreSQL the daemons are ``casesignd serve --node n1`` etc. on one
config file, one shared state directory and one database (a fresh one each run) of a
throwaway cluster that syncs its WAL at every commit; every daemon has the same
config as the SQLite one (8 jobs at once, 2 CPU processes). The cluster lives in the
working directory, as SQLite's file does (tmpfs by default), so both see the same
medium.

Throughput is counted from the jobs' own clocks (first admission to last finish);
CPU is the daemons' process trees, and apart from it the PostgreSQL server's (its
backends included). The configurations take turns, ``--repeat`` times, and each
shows its median run: the machine is shared. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import e2e, loadavg  # noqa: E402  (scripts/, beside this file)
from benchlib.documents import make_pages  # noqa: E402

from tests.helpers_nodes import Nodes  # noqa: E402
from tests.pgcluster import Cluster, running_cluster  # noqa: E402

CONCURRENCY = 8  # workers.concurrency of every daemon, as in scripts/benchlib/e2e.py


def run_nodes(workdir: Path, doc: bytes, jobs: int, count: int, cluster: Cluster
              ) -> dict[str, Any]:
    """``jobs`` jobs through ``count`` daemons on a fresh database; the figures."""
    warm_jobs = 8 * count
    with cluster.fresh_database() as dsn:
        nodes = Nodes(workdir, dsn, count, {
            "logging": {"level": "warning"},
            "workers": {"concurrency": CONCURRENCY, "max_queue_depth": jobs + warm_jobs + 10}},
            test_parts=False)
        nodes.start()
        try:
            urls = [n.url for n in nodes.nodes]
            contract = e2e.upload_and_warm(nodes, urls, doc, warm_jobs)
            cpu0, pg0 = _cpu(nodes), e2e.tree_cpu_s(cluster.server_pid())
            claims0 = _claims_by_node(dsn)
            done = e2e.aiohttp_client(urls, nodes.token, [contract], jobs, "run")
            cpu, pg_cpu = _cpu(nodes) - cpu0, e2e.tree_cpu_s(cluster.server_pid()) - pg0
            by_node = {k: n - claims0.get(k, 0) for k, n in _claims_by_node(dsn).items()}
        finally:
            nodes.stop()
    out = {"store": "postgres", "nodes": count, "client": "aiohttp", **e2e.summarize(done, cpu)}
    out["postgres_cpu_ms_per_job"] = round(pg_cpu * 1000 / max(1, out["ready"]), 2)
    out["claims_by_node"] = by_node
    return out


def _cpu(nodes: Nodes) -> float:
    return sum(e2e.tree_cpu_s(n.proc.pid) for n in nodes.nodes if n.proc is not None)


def _claims_by_node(dsn: str) -> dict[str, int]:
    """Claims per node, from the audit trail (a claim's actor is worker:NODE:...)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT split_part(actor, ':', 2), count(*) FROM events "
                            "WHERE type = 'claimed' GROUP BY 1 ORDER BY 1").fetchall()
    return {node: int(n) for node, n in rows}


def run_sqlite(workdir: Path, doc: bytes, jobs: int) -> dict[str, Any]:
    """The single daemon on SQLite (scripts/benchlib/e2e.py), labelled for the table."""
    r = e2e.run(workdir, doc, jobs, "aiohttp", concurrency=CONCURRENCY)
    return {"store": "sqlite", "nodes": 1, **r}


def turns(work: Path, doc: bytes, jobs: int, counts: list[int], repeat: int
          ) -> list[dict[str, Any]]:
    """Every configuration ``repeat`` times, taking turns; each one's median run."""
    runs: dict[str, list[dict[str, Any]]] = {}
    work.chmod(0o711)  # the server runs as postgres and must reach its directory
    with running_cluster(fsync=True, parent=str(work)) as cluster:
        for i in range(repeat):
            runs.setdefault("sqlite", []).append(run_sqlite(work / f"sqlite-{i}", doc, jobs))
            for k in counts:
                runs.setdefault(f"postgres-{k}", []).append(
                    run_nodes(work / f"pg-{k}-{i}", doc, jobs, k, cluster))
    return [sorted(rs, key=lambda r: r["jobs_per_s"])[len(rs) // 2] for rs in runs.values()]


def e2e_document(work: Path) -> bytes:
    """The one-page contract every job signs (as bench_sign's end-to-end runs: benchlib.documents)."""
    return make_pages(work / "e2e.pdf", 1).read_bytes()


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="scripts/bench sign --store postgres",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=("postgres",), default="postgres")
    ap.add_argument("--nodes", default="1,2,3", help="daemon counts on PostgreSQL (a comma list)")
    ap.add_argument("--jobs", type=int, default=1000, help="jobs a run")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each configuration, taking turns; the median is shown")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="working directory: state, SQLite file and cluster (default tmpfs)")
    args = ap.parse_args(argv)
    counts = [int(k) for k in args.nodes.split(",")]
    repeat = max(1, args.repeat)
    load0 = loadavg.snapshot()
    with tempfile.TemporaryDirectory(prefix="bench-nodes-", dir=args.dir) as tmp:
        work = Path(tmp)
        doc = e2e_document(work)
        rows = turns(work, doc, args.jobs, counts, repeat)
    load1 = loadavg.snapshot()
    sqlite = rows[0]
    print(f"one-page sign_case jobs end to end, {args.jobs} a run, the median of {repeat} "
          "(CPU: the daemons and their workers; PG CPU: the PostgreSQL server)")
    print(f"{'store':<10} {'daemons':>7} {'ready':>13} {'jobs/s':>8} {'vs SQLite':>10} "
          f"{'CPU ms/job':>11} {'PG CPU ms/job':>14} {'processing p50':>15}  claims by node")
    for r in rows:
        pg_cpu = r.get("postgres_cpu_ms_per_job")
        print(f"{r['store']:<10} {r['nodes']:>7} {r['ready']:>6} of {r['jobs']:<5}"
              f"{r['jobs_per_s']:>8.1f} {r['jobs_per_s'] / sqlite['jobs_per_s']:>9.2f}x "
              f"{r['cpu_ms_per_job']:>11.2f} {'' if pg_cpu is None else f'{pg_cpu:.2f}':>14} "
              f"{r['processing_p50_ms']:>12.2f} ms  {r.get('claims_by_node', '')}")
    print(loadavg.describe(load0, load1))
    print(json.dumps({
        "jobs": args.jobs, "repeat": repeat,
        "sqlite_jobs_per_s": sqlite["jobs_per_s"],
        "postgres_jobs_per_s": {str(r["nodes"]): r["jobs_per_s"] for r in rows[1:]},
        "postgres_vs_sqlite": {str(r["nodes"]): round(r["jobs_per_s"] / sqlite["jobs_per_s"], 2)
                               for r in rows[1:]},
        "runs": rows,
        "load_average": {"start": load0, "end": load1},
    }))



if __name__ == "__main__":
    main(sys.argv[1:])

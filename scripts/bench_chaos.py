"""Chaos benchmark: crashes and faults at a larger scale than the tests.

    scripts/bench chaos [--jobs N] [--kills K] [--fault-jobs M] [--seed S] [--keep]
    scripts/bench chaos --store postgres [--nodes 3] [--jobs N] [--kills K] [--seed S]

Two phases, each on its own fresh daemon (``casesignd init`` in a temp directory):

1. crashes: N mixed jobs (sign_case packets of several sizes with evidence and
   duplicates, contracts trickling from an HTTP source, render_invoice with and
   without a signature, kiosk signatures) while the daemon is killed with SIGKILL K
   times, aimed mid-download, mid-signature and at random, and restarted each time;
2. faults: M jobs while the HTTP source answers 5xx and stalls in bursts, the TSA
   flaps between 503 and up, and the temp quota holds about two jobs at once.

With ``--store postgres``, the crash phase instead runs on ``--nodes`` daemons sharing
one state directory and one PostgreSQL database (a throwaway cluster), the clients
spread over them, while one node at a time is killed -9 and restarted (every fourth
stays down past its leases, so the others take its jobs back); the fault phase is the
single daemon's and is not run.

After each phase the invariants of tests/helpers_chaos.py are checked, and on several
daemons also that every acknowledged job ended ready exactly once (one ``succeeded``
event each). The last line is one JSON object: jobs submitted, crashes and faults
injected, jobs lost, artifacts duplicated, invalid signatures, the audit chain status
and files left in temp (and on several daemons the kills, claims and cut attempts of
each node). The exit status is 1 when any loss figure is not zero.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import loadavg  # noqa: E402  (scripts/, beside this file)

from casesignd.ops import devpki  # noqa: E402
from tests.daemon import Daemon  # noqa: E402
from tests.helpers_chaos import (  # noqa: E402
    Driver,
    Report,
    ThreadedSource,
    check_invariants,
    db_rows,
    leftover_processes,
    make_workload,
    ready_once,
    temp_leftovers,
    wait_all_terminal,
)
from tests.helpers_http_source import Body, Hang, Status  # noqa: E402
from tests.helpers_nodes import Nodes  # noqa: E402
from tests.helpers_tsa import LocalTsa  # noqa: E402
from tests.pgcluster import running_cluster  # noqa: E402

SIGN_DELAY_MS = 150
LEASE_S = 10.0


def _finish(d: Daemon | Nodes, driver: Driver, work: Path, **kw: Any) -> tuple[Report, float]:
    started = time.monotonic()
    driver.join_clients(600)
    left = wait_all_terminal(d, 600)
    report = check_invariants(d, driver.tally, work, validate_all=True, **kw)
    if left:
        report.problems.append(f"{left} jobs did not finish")
    report.problems += driver.tally.unexpected
    if len(driver.tally.acked) < len(driver.plan):
        report.problems.append(f"only {len(driver.tally.acked)} of {len(driver.plan)} acknowledged")
    code = d.stop()
    if code != 0:
        report.problems.append(f"the daemon did not stop cleanly (exit status {code})")
    # What a stopped daemon left in its own working files; its key-slot locks
    # (tmp/NODE.key-slots) are kept by design.
    report.temp_files_left += temp_leftovers(d)
    orphans = leftover_processes(d)
    if orphans:
        report.problems.append(f"{len(orphans)} processes outlived the daemon")
    return report, time.monotonic() - started


def _crash_config(source: ThreadedSource) -> dict[str, Any]:
    """The crash phases' daemon settings: the scripted source, short leases."""
    return {"sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                         "read_timeout_s": 10.0}],
            "kiosk": {"deadline_ms": 20000},
            "workers": {"concurrency": 4, "lease_s": LEASE_S, "heartbeat_s": 2.0}}


def crash_phase(base: Path, n_jobs: int, kills: int, seed: int) -> dict[str, Any]:
    with ThreadedSource() as source:
        d = Daemon(base / "crash", _crash_config(source), sign_delay_ms=SIGN_DELAY_MS)
        try:
            plan = make_workload(base / "crash-work", n_jobs, seed=seed, source=source)
            started = time.monotonic()
            d.start()
            driver = Driver(d, plan, give_up_s=1800)
            driver.run_with_kills(kills, source=source, seed=seed,
                                  sign_delay_s=SIGN_DELAY_MS / 1000)
            report, check_s = _finish(d, driver, base / "crash-check")
            wall = time.monotonic() - started - check_s
        finally:
            _kill(d)
    reclaimed = sum(1 for _ in db_rows(d.db, "SELECT 1 FROM events WHERE type = 'lease_expired'"))
    return {"phase": "crashes", "jobs": len(plan), "kills": dict(driver.tally.kills),
            "attempts_cut_by_kills": reclaimed, "client_retries": driver.tally.client_retries,
            "seconds": round(wall, 1), "report": report}


def nodes_phase(base: Path, n_jobs: int, kills: int, seed: int, count: int) -> dict[str, Any]:
    """The crash phase on ``count`` daemons (``serve --node n1`` ...) sharing one state
    directory and one PostgreSQL database: the clients spread over them, one node at a
    time killed -9 and restarted (tests/helpers_chaos.py's ``run_with_node_kills``).
    The cluster keeps running throughout, so it needs no fsync: a daemon's kill -9
    loses nothing a committed transaction holds."""
    with running_cluster() as cluster, cluster.fresh_database() as dsn, \
            ThreadedSource() as source:
        nodes = Nodes(base / "nodes", dsn, count, _crash_config(source),
                      sign_delay_ms=SIGN_DELAY_MS)
        try:
            plan = make_workload(base / "nodes-work", n_jobs, seed=seed, source=source)
            started = time.monotonic()
            nodes.start()
            driver = Driver(nodes, plan, give_up_s=1800)
            driver.run_with_node_kills(kills, seed=seed, sign_delay_s=SIGN_DELAY_MS / 1000,
                                       down_s=LEASE_S + 2)
            report, check_s = _finish(nodes, driver, base / "nodes-check")
            for node in nodes.nodes:
                if nodes.exit_codes.get(node.node, 0) != 0:
                    report.problems.append(f"node {node.node} exited {nodes.exit_codes[node.node]}: "
                                           f"{node.logs()[-1500:]}")
            once, problems = ready_once(nodes, driver.tally)
            report.problems += problems
            wall = time.monotonic() - started - check_s
            figures = _node_figures(dsn)
        finally:
            nodes.kill_all()
    return {"phase": f"{count} nodes", "jobs": len(plan), "kills": dict(driver.tally.kills),
            "kills_by_node": dict(sorted(driver.tally.node_kills.items())), **figures,
            "ready_exactly_once": once, "client_retries": driver.tally.client_retries,
            "seconds": round(wall, 1), "report": report}


def _node_figures(dsn: str) -> dict[str, Any]:
    """From the audit trail: claims per node (a claim's actor is worker:NODE:...), the
    attempts cut per node (a lease_expired event names the old owner, NODE:...), and
    how many of those the next claim gave to another node."""
    claims: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    cut_from: dict[str, str] = {}  # job id -> the node whose lease expired last
    elsewhere = 0
    for r in db_rows(dsn, "SELECT job_id, type, actor, detail FROM events "
                          "WHERE type IN ('claimed', 'lease_expired') ORDER BY seq"):
        if r["type"] == "claimed":
            node = r["actor"].split(":")[1]
            claims[node] += 1
            elsewhere += cut_from.pop(r["job_id"], node) != node
        else:
            node = json.loads(r["detail"])["owner"].split(":")[0]
            cut[node] += 1
            cut_from[r["job_id"]] = node
    return {"claims_by_node": dict(sorted(claims.items())),
            "attempts_cut_by_kills": sum(cut.values()),
            "attempts_cut_by_node": dict(sorted(cut.items())),
            "taken_back_by_another_node": elsewhere}


def fault_phase(base: Path, n_jobs: int, seed: int, max_attempts: int) -> dict[str, Any]:
    ca = devpki.make_ca("casesignd bench CA")
    tsa_ident = devpki.make_tsa(ca, "casesignd bench TSA")
    with ThreadedSource() as source, LocalTsa(tsa_ident) as tsa:
        d = Daemon(base / "faults", {
            "sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                         "read_timeout_s": 0.5, "max_attempts": 3, "base_delay_s": 0.05,
                         "max_delay_s": 0.2}],
            "policies": [{"version": "contract-v1", "tsa_url": tsa.url, "tsa_timeout_s": 2.0}],
            "storage": {"temp_quota_bytes": 3 * 1024 * 1024, "temp_quota_retry_s": 0.3},
            "retry": {"base_delay_s": 0.2, "max_delay_s": 1.0, "max_attempts":
                      {"sign_case": max_attempts, "render_invoice": max_attempts}},
            "kiosk": {"deadline_ms": 20000}})
        stop = threading.Event()
        flaps = [0]

        def flap() -> None:
            # The TSA is down one second in four.
            while not stop.wait(1.0):
                tsa.mode = "503" if tsa.mode == "ok" else "ok"
                flaps[0] += 1
                if stop.wait(2.0 if tsa.mode == "ok" else 0.0):
                    break

        try:
            plan = make_workload(base / "fault-work", n_jobs, seed=seed, source=source,
                                 trickle_s=0.2)
            # Every remote contract meets a burst first: 5xx, a stall, 5xx, then bytes.
            remote = (base / "fault-work" / "remote.pdf").read_bytes()
            for i, p in enumerate(plan):
                items = p.body.get("items", []) if p.kind == "sign_case" else []
                for it in items:
                    if it["object_ref"].startswith("remote:"):
                        path = f"contracts/flaky-{i}.pdf"
                        it["object_ref"] = f"remote:{path}"
                        source.script("/" + path, [Status(503), Hang(5), Status(500),
                                                   Body(remote)])
            started = time.monotonic()
            d.start()
            flapper = threading.Thread(target=flap, daemon=True)
            flapper.start()
            driver = Driver(d, plan, give_up_s=1800)
            driver.start_clients()
            driver.join_clients(1200)
            wait_all_terminal(d, 1200)
            stop.set()
            flapper.join(5)
            tsa.mode = "ok"
            report, check_s = _finish(d, driver, base / "fault-check",
                                      trust_extra=[ca.cert], expect_all_succeeded=True)
            wall = time.monotonic() - started - check_s
        finally:
            stop.set()
            _kill(d)
    retries: dict[str, int] = {}
    for r in db_rows(d.db, "SELECT detail FROM events WHERE type = 'retry_scheduled'"):
        detail = json.loads(r["detail"])
        code = detail.get("code", "?") + (f":{detail['reason']}" if detail.get("reason") else "")
        retries[code] = retries.get(code, 0) + 1
    # The first three answers of every flaky path are faults; the fourth is the bytes.
    source_faults = sum(min(n, 3) for path, n in source.server.hits.items() if "flaky-" in path)
    return {"phase": "faults", "jobs": len(plan), "tsa_flaps": flaps[0],
            "source_faults": source_faults, "job_retries_by_code": retries,
            "seconds": round(wall, 1), "report": report}


def _kill(d: Daemon) -> None:
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=600, help="jobs in the crash phase")
    ap.add_argument("--kills", type=int, default=15, help="SIGKILLs in the crash phase")
    ap.add_argument("--fault-jobs", type=int, default=300, help="jobs in the fault phase")
    ap.add_argument("--fault-max-attempts", type=int, default=30,
                    help="retry.max_attempts in the fault phase: a temp_quota wait counts as an "
                         "attempt, so the default of 6 fails jobs under sustained temp pressure")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the state directories")
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite",
                    help="postgres: the crash phase on --nodes daemons sharing one PostgreSQL "
                         "database and state directory, instead of both phases on one daemon")
    ap.add_argument("--nodes", type=int, default=3, help="daemons, with --store postgres")
    args = ap.parse_args()
    load0 = loadavg.snapshot()
    # The scripted source's stalls end in writes to clients that gave up: not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    base = Path(tempfile.mkdtemp(prefix="casesignd-chaos-"))
    phases = []
    try:
        if args.store == "postgres":
            phases.append(nodes_phase(base, args.jobs, args.kills, args.seed, args.nodes))
        elif args.jobs:
            phases.append(crash_phase(base, args.jobs, args.kills, args.seed))
        if args.fault_jobs and args.store == "sqlite":
            phases.append(fault_phase(base, args.fault_jobs, args.seed + 1,
                                      args.fault_max_attempts))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{'phase':<8} {'jobs':>6} {'seconds':>8} {'lost':>5} {'dup':>4} {'invalid':>8} "
          f"{'checked':>8} {'audit':>7} {'temp':>5}  injected")
    for p in phases:
        r: Report = p["report"]
        injected = (p["kills"] if "kills" in p
                    else {"tsa_flaps": p["tsa_flaps"], "source_faults": p["source_faults"]})
        print(f"{p['phase']:<8} {p['jobs']:>6} {p['seconds']:>8} {r.jobs_lost:>5} "
              f"{r.artifacts_duplicated + r.signatures_doubled:>4} {r.signatures_invalid:>8} "
              f"{r.signatures_checked:>8} {r.audit_chain:>7} {r.temp_files_left:>5}  {injected}")
        if "kills_by_node" in p:
            print(f"  kills by node {p['kills_by_node']}, claims by node {p['claims_by_node']}, "
                  f"attempts cut by node {p['attempts_cut_by_node']} "
                  f"({p['taken_back_by_another_node']} taken back by another node); "
                  f"{p['ready_exactly_once']} of {r.jobs_acked} acknowledged jobs ready with "
                  "exactly one succeeded event")
        for problem in r.problems[:20]:
            print(f"  problem: {problem}")
    load1 = loadavg.snapshot()
    print(loadavg.describe(load0, load1))
    reports = [p["report"] for p in phases]
    out = {
        "jobs_submitted": sum(p["jobs"] for p in phases),
        "jobs_acknowledged": sum(r.jobs_acked for r in reports),
        "crashes_injected": sum(sum(p["kills"].values()) for p in phases if "kills" in p),
        "crash_aims": next((p["kills"] for p in phases if "kills" in p), {}),
        "attempts_cut_by_crashes": sum(p.get("attempts_cut_by_kills", 0) for p in phases),
        "faults_injected": sum(p.get("tsa_flaps", 0) + p.get("source_faults", 0) for p in phases),
        "fault_retries_by_code": next((p["job_retries_by_code"] for p in phases
                                       if p["phase"] == "faults"), {}),
        "jobs_lost": sum(r.jobs_lost + r.jobs_not_terminal for r in reports),
        "jobs_failed": sum(r.jobs_failed for r in reports),
        "artifacts_duplicated": sum(r.artifacts_duplicated + r.artifacts_unexplained
                                    + r.signatures_doubled for r in reports),
        "invalid_signatures": sum(r.signatures_invalid for r in reports),
        "signatures_checked": sum(r.signatures_checked for r in reports),
        "audit_chain": "intact" if all(r.audit_chain == "intact" for r in reports) else "broken",
        "temp_files_left": sum(r.temp_files_left for r in reports),
        "problems": sum(len(r.problems) for r in reports),
        "seconds": {p["phase"]: p["seconds"] for p in phases},
        "store": args.store,
        "load_average": {"start": load0, "end": load1},
    }
    for p in phases:
        if "kills_by_node" in p:
            out.update({"nodes": args.nodes, **{k: p[k] for k in (
                "kills_by_node", "claims_by_node", "attempts_cut_by_node",
                "taken_back_by_another_node", "ready_exactly_once")}})
    print(json.dumps(out, sort_keys=True))
    losses = ("jobs_lost", "jobs_failed", "artifacts_duplicated", "invalid_signatures",
              "temp_files_left", "problems")
    return 0 if all(out[k] == 0 for k in losses) and out["audit_chain"] == "intact" else 1


if __name__ == "__main__":
    sys.exit(main())

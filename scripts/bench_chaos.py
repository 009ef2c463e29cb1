"""Chaos benchmark: crashes and faults at a larger scale than the tests.

    scripts/bench chaos [--jobs N] [--kills K] [--fault-jobs M] [--seed S] [--keep]

Two phases, each on its own fresh daemon (``casesignd init`` in a temp directory):

1. crashes: N mixed jobs (sign_case packets of several sizes with evidence and
   duplicates, contracts trickling from an HTTP source, render_invoice with and
   without a signature, kiosk signatures) while the daemon is killed with SIGKILL K
   times, aimed mid-download, mid-signature and at random, and restarted each time;
2. faults: M jobs while the HTTP source answers 5xx and stalls in bursts, the TSA
   flaps between 503 and up, and the temp quota holds about two jobs at once.

After each phase the invariants of tests/helpers_chaos.py are checked. The last line
is one JSON object: jobs submitted, crashes and faults injected, jobs lost, artifacts
duplicated, invalid signatures, the audit chain status and files left in temp. The
exit status is 1 when any loss figure is not zero.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from casesignd import devpki  # noqa: E402
from tests.daemon import Daemon  # noqa: E402
from tests.helpers_chaos import (  # noqa: E402
    Driver,
    Report,
    ThreadedSource,
    check_invariants,
    db_rows,
    leftover_processes,
    make_workload,
    wait_all_terminal,
)
from tests.helpers_http_source import Body, Hang, Status  # noqa: E402
from tests.helpers_tsa import LocalTsa  # noqa: E402

SIGN_DELAY_MS = 150


def _finish(d: Daemon, driver: Driver, work: Path, **kw: Any) -> tuple[Report, float]:
    started = time.monotonic()
    driver.join_clients(600)
    left = wait_all_terminal(d, 600)
    report = check_invariants(d, driver.tally, work, validate_all=True, **kw)
    if left:
        report.problems.append(f"{left} jobs did not finish")
    report.problems += driver.tally.unexpected
    if len(driver.tally.acked) < len(driver.plan):
        report.problems.append(f"only {len(driver.tally.acked)} of {len(driver.plan)} acknowledged")
    if d.stop() != 0:
        report.problems.append("the daemon did not stop cleanly")
    report.temp_files_left += sum(1 for _ in (d.dir / "tmp").rglob("*"))
    orphans = leftover_processes(d)
    if orphans:
        report.problems.append(f"{len(orphans)} processes outlived the daemon")
    return report, time.monotonic() - started


def crash_phase(base: Path, n_jobs: int, kills: int, seed: int) -> dict[str, Any]:
    with ThreadedSource() as source:
        d = Daemon(base / "crash", {
            "sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                         "read_timeout_s": 10.0}],
            "kiosk": {"deadline_ms": 20000},
            "workers": {"concurrency": 4, "lease_s": 10.0, "heartbeat_s": 2.0}},
            env={"CASESIGND_TEST_SIGN_DELAY_MS": str(SIGN_DELAY_MS)})
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
    args = ap.parse_args()
    # The scripted source's stalls end in writes to clients that gave up: not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    base = Path(tempfile.mkdtemp(prefix="casesignd-chaos-"))
    phases = []
    try:
        if args.jobs:
            phases.append(crash_phase(base, args.jobs, args.kills, args.seed))
        if args.fault_jobs:
            phases.append(fault_phase(base, args.fault_jobs, args.seed + 1,
                                      args.fault_max_attempts))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{'phase':<8} {'jobs':>6} {'seconds':>8} {'lost':>5} {'dup':>4} {'invalid':>8} "
          f"{'checked':>8} {'audit':>7} {'temp':>5}  injected")
    for p in phases:
        r: Report = p["report"]
        injected = (p.get("kills") if p["phase"] == "crashes"
                    else {"tsa_flaps": p["tsa_flaps"], "source_faults": p["source_faults"]})
        print(f"{p['phase']:<8} {p['jobs']:>6} {p['seconds']:>8} {r.jobs_lost:>5} "
              f"{r.artifacts_duplicated + r.signatures_doubled:>4} {r.signatures_invalid:>8} "
              f"{r.signatures_checked:>8} {r.audit_chain:>7} {r.temp_files_left:>5}  {injected}")
        for problem in r.problems[:20]:
            print(f"  problem: {problem}")
    reports = [p["report"] for p in phases]
    out = {
        "jobs_submitted": sum(p["jobs"] for p in phases),
        "jobs_acknowledged": sum(r.jobs_acked for r in reports),
        "crashes_injected": sum(sum(p["kills"].values()) for p in phases if p["phase"] == "crashes"),
        "crash_aims": next((p["kills"] for p in phases if p["phase"] == "crashes"), {}),
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
    }
    print(json.dumps(out, sort_keys=True))
    losses = ("jobs_lost", "jobs_failed", "artifacts_duplicated", "invalid_signatures",
              "temp_files_left", "problems")
    return 0 if all(out[k] == 0 for k in losses) and out["audit_chain"] == "intact" else 1


if __name__ == "__main__":
    sys.exit(main())

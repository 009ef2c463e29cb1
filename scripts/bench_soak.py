#!/usr/bin/env python3
"""Benchmark: disk use and memory of a daemon under a steady mix for minutes, with
retention on (every ``[retention]`` window a few seconds) against retention off.

``scripts/bench soak`` runs the compressed day of :mod:`soak_day` (its own options);
``scripts/bench soak --compare`` runs this comparison.

Each configuration gets its own daemon on loopback (``casesignd init`` in a temporary
directory, then ``casesignd serve``) and the same mix, paced at ``--rate`` arrivals a
second for ``--minutes``, one after the other so that neither takes CPU from the
other on a small machine:

- ``sign_case``: a contract PDF uploaded to a case of its own, sometimes with an
  evidence PNG, then the job; polled until it ends;
- ``kiosk``: ``POST /v1/sign`` with a one-page contract;
- ``invoice``: ``render_invoice``, half of them signed;
- ``refused``: a malformed PDF, as a ``sign_case`` job (it fails ``permanent_input``)
  or to the kiosk (422): what ``rejected_s`` keeps.

Every document is new bytes (a unique id written into the PDF's text) and every case
id unique, so nothing is stored once for many jobs. Every ``--sample-s`` the bench
reads the state directory (objects/, artifacts/ and the SQLite files, each inode
once), the daemon's gauges from ``GET /metrics`` (``casesignd_disk_bytes``,
``casesignd_removed_total``, ``casesignd_jobs``) and its RSS (``/proc/PID/status``);
the table shows a row every ``--row-s``. Retention counts as flat when, over the
second half of the run (past the first retention window), the state directory's
slope with retention is under 10% of the slope without.

    scripts/bench soak --compare [--minutes 3] [--rate 30] [--keep-s 20] [--sweep-s 5]

Prints progress on stderr, then the table, the answers that were not 2xx (by route
and status, deliberate refusals apart), the daemon's warnings, and as its last line
one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import run_script  # noqa: E402  (scripts/, beside this file)
from benchlib.soak import (  # noqa: E402
    MIX,
    MiB,
    Mix,
    Tally,
    contract_template,
    parse_metrics,
    rss_kib,
    slope_per_min,
    state_bytes,
    tree_rss_kib,
)

from tests.daemon import Daemon  # noqa: E402


async def sample(mix: Mix, d: Daemon, t0: float) -> dict[str, Any]:
    async with mix.session.get(f"{d.url}/metrics") as r:
        metrics = parse_metrics(await r.text())
    assert d.proc is not None
    disk = await asyncio.to_thread(state_bytes, d.dir, d.db)
    return {"t": round(time.monotonic() - t0, 1), "admitted": mix.tally.admitted,
            "state": disk, **metrics, "job_rows": sum(metrics["jobs"].values()),
            "rss_kib": rss_kib(d.proc.pid), "tree_rss_kib": tree_rss_kib(d.proc.pid)}


async def soak(d: Daemon, template: bytes, tally: Tally, args: argparse.Namespace,
               tag: str) -> None:
    """The mix at ``args.rate`` arrivals a second for ``args.minutes``, sampled."""
    mix = Mix(d, template, tally, tag)
    rng = random.Random(7)  # the same sequence of arrivals for both configurations
    kinds, weights = list(MIX), list(MIX.values())
    inflight: set[asyncio.Task[None]] = set()
    duration = args.minutes * 60
    try:
        t0 = time.monotonic()
        tally.samples.append(await sample(mix, d, t0))
        next_sample = t0 + args.sample_s
        next_at = t0
        while (now := time.monotonic()) < t0 + duration:
            if now >= next_sample:
                s = await sample(mix, d, t0)
                tally.samples.append(s)
                print(f"  {tag} t={s['t']:>5}s admitted={s['admitted']} state="
                      f"{s['state']['total'] / MiB:.1f} MiB rows={s['job_rows']} "
                      f"rss={s['rss_kib'] / 1024:.0f} MiB", file=sys.stderr)
                next_sample += args.sample_s
                continue
            if next_at > now:
                await asyncio.sleep(min(next_at, next_sample) - now)
                continue
            # An open loop: arrivals keep their pace whatever the daemon answers, up to a
            # bound past which an arrival is dropped (and counted) rather than queued.
            next_at += 1 / args.rate
            if len(inflight) >= args.max_inflight:
                tally.dropped += 1
                continue
            task = asyncio.create_task(mix.one(rng.choices(kinds, weights)[0]))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(inflight, timeout=90)
        tally.samples.append(await sample(mix, d, t0))
    finally:
        for t in inflight:
            t.cancel()
        await mix.session.close()


# --- figures ---------------------------------------------------------------------------


def figures(tally: Tally, settle_s: float, duration_s: float) -> dict[str, Any]:
    samples = tally.samples
    total = [(s["t"], s["state"]["total"]) for s in samples]
    # The second half, and never before the first retention window has passed.
    start = max(settle_s, duration_s / 2)
    late = [p for p in total if p[0] >= start]

    def late_slope(*keys: str, less: str = "") -> int:
        return round(slope_per_min([
            (s["t"], sum(s["state"][k] for k in keys) - (s["state"][less] if less else 0))
            for s in samples if s["t"] >= start]))
    last = samples[-1]
    return {
        "admitted": tally.admitted, "dropped_arrivals": tally.dropped, "sent": dict(tally.sent),
        "state_bytes_first": total[0][1], "state_bytes_last": total[-1][1],
        "state_bytes_max": max(y for _, y in total),
        "state_bytes_last_by_area": {k: v for k, v in last["state"].items() if k != "total"},
        "disk_gauges_last": last["disk"],
        "slope_bytes_per_min": round(slope_per_min(total)),
        "slope_second_half_bytes_per_min": round(slope_per_min(late)),
        "second_half_samples": len(late),
        "store_slope_second_half_bytes_per_min": late_slope("store"),
        "audit_slope_second_half_bytes_per_min": late_slope("audit"),
        "besides_audit_slope_second_half_bytes_per_min": late_slope("total", less="audit"),
        "audit_bytes_last": last["state"]["audit"],
        "job_rows_last": last["job_rows"], "job_rows_max": max(s["job_rows"] for s in samples),
        "rss_mb_first": round(samples[0]["rss_kib"] / 1024, 1),
        "rss_mb_last": round(last["rss_kib"] / 1024, 1),
        "rss_mb_max": round(max(s["rss_kib"] for s in samples) / 1024, 1),
        "tree_rss_mb_last": round(last["tree_rss_kib"] / 1024, 1),
        "removed": last["removed"], "outcomes": dict(sorted(tally.outcomes.items())),
        "not_2xx": dict(sorted(tally.unexpected.items())),
        "refused_as_meant": dict(sorted(tally.refused_as_meant.items())),
    }


def table(on: Tally, off: Tally, row_s: float) -> str:
    def cells(s: dict[str, Any] | None) -> str:
        if s is None:
            return " " * 69
        g = s["disk"]
        removed = sum(v for k, v in s["removed"].items() if k.endswith("/retention"))
        return (f"{s['admitted']:>7} {s['state']['total'] / MiB:>8.2f} "
                f"{s['state']['audit'] / MiB:>5.1f} "
                f"{g.get('objects', 0) / MiB:>6.2f}/{g.get('artifacts', 0) / MiB:>6.2f}/"
                f"{g.get('store', 0) / MiB:>6.2f} {s['job_rows']:>6} {removed:>7} "
                f"{s['rss_kib'] / 1024:>6.0f}")

    def rows(t: Tally) -> dict[int, dict[str, Any]]:
        # The first sample at or past each row's time; the last sample closes the table.
        out: dict[int, dict[str, Any]] = {}
        for s in t.samples:
            out.setdefault(int(s["t"] // row_s), s)
        if all(s is not t.samples[-1] for s in out.values()):
            out[max(out) + 1] = t.samples[-1]
        return out

    a, b = rows(on), rows(off)
    head = (f"{'jobs':>7} {'state MB':>8} {'audit':>5} {'objects/artifacts/store MB':>20} "
            f"{'rows':>6} "
            f"{'removed':>7} {'RSS MB':>6}")
    lines = [f"{'':>7} | {'retention on':<69} | {'retention off':<69}",
             f"{'elapsed':>7} | {head} | {head}"]
    for k in sorted(set(a) | set(b)):
        t = (a.get(k) or b.get(k) or {}).get("t", 0)
        lines.append(f"{t:>6.0f}s | {cells(a.get(k))} | {cells(b.get(k))}")
    lines.append("state MB: the walk of objects/ + artifacts/ + the SQLite files; audit: "
                 "the audit log's pages in the SQLite file (kept for ever); objects/artifacts/"
                 "store: the daemon's casesignd_disk_bytes gauges; rows: casesignd_jobs "
                 "summed; removed: casesignd_removed_total by retention")
    return "\n".join(lines)


def daemon_warnings(d: Daemon) -> Counter[str]:
    """The daemon's log lines at warning and above, by event name."""
    out: Counter[str] = Counter()
    for line in d.logs().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            out["(not JSON) " + line[:80]] += 1
            continue
        if rec.get("level") in ("warning", "error", "critical"):
            # The malformed PDFs the mix sends are logged as failed jobs: they are meant.
            meant = " (meant)" if rec.get("code") == "malformed_pdf" else ""
            out[f"{rec['level']} {rec.get('msg')} {rec.get('code', '')}".strip() + meant] += 1
    return out


def run_one(label: str, keep_s: float, args: argparse.Namespace, work: Path,
            template: bytes) -> tuple[Tally, Counter[str]]:
    retention = {"objects_s": keep_s, "artifacts_s": keep_s, "jobs_s": keep_s,
                 "rejected_s": keep_s, "sweep_interval_s": args.sweep_s}
    d = Daemon(work / label, {"retention": retention,
                              "workers": {"concurrency": args.workers},
                              "storage": {"temp_dir": str(work / f"{label}-tmp")}},
               env={"PYTHONPATH": str(ROOT)}, test_parts=False)  # the product alone
    tally = Tally()
    print(f"{label}: retention {keep_s:g} s, sweep every {args.sweep_s:g} s", file=sys.stderr)
    d.start()
    try:
        asyncio.run(soak(d, template, tally, args, label))
    finally:
        code = d.stop(timeout_s=60)
    warnings = daemon_warnings(d)
    if code:
        warnings[f"exit code {code}"] += 1
    return tally, warnings


def main() -> None:
    if "--compare" not in sys.argv[1:]:  # the compressed day: scripts/soak_day.py
        run_script("soak_day.py", sys.argv[1:])
    sys.argv.remove("--compare")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="soak time per configuration")
    ap.add_argument("--rate", type=float, default=30.0, help="arrivals a second, all kinds")
    ap.add_argument("--keep-s", type=float, default=20.0,
                    help="retention on: objects_s, artifacts_s, jobs_s and rejected_s")
    ap.add_argument("--sweep-s", type=float, default=5.0, help="retention.sweep_interval_s")
    ap.add_argument("--sample-s", type=float, default=5.0, help="how often to measure")
    ap.add_argument("--row-s", type=float, default=15.0, help="a table row this often")
    ap.add_argument("--pages", type=int, default=3, help="pages of each contract")
    ap.add_argument("--workers", type=int, default=4, help="workers.concurrency")
    ap.add_argument("--max-inflight", type=int, default=200,
                    help="arrivals in flight past which the next is dropped")
    ap.add_argument("--only", choices=("on", "off"), default=None)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="working directory (default: tmpfs, so a shared disk adds no noise)")
    ap.add_argument("--keep", action="store_true", help="keep the daemons' directories")
    args = ap.parse_args()

    template = contract_template(args.pages)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-", dir=args.dir))
    tallies: dict[str, Tally] = {}
    warnings: dict[str, Counter[str]] = {}
    try:
        for label, keep_s in (("on", args.keep_s), ("off", 0.0)):
            if args.only in (None, label):
                tallies[label], warnings[label] = run_one(label, keep_s, args, work, template)
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    duration = args.minutes * 60
    settle = args.keep_s + 2 * args.sweep_s  # a thing due is gone by the next sweep
    result: dict[str, Any] = {"bench": "soak", "minutes": args.minutes, "rate": args.rate,
                              "keep_s": args.keep_s, "sweep_s": args.sweep_s,
                              "contract_bytes": len(template), "cpus": os.cpu_count()}
    for label, key in (("on", "with_retention"), ("off", "without_retention")):
        if label in tallies:
            result[key] = figures(tallies[label], settle, duration)
            result[key]["daemon_warnings"] = dict(warnings[label])
            # The audit log is never removed (each removal adds an event): what it
            # costs per job is the figure to plan the store's disk by.
            admitted = result[key]["admitted"]
            result[key]["audit_bytes_per_job"] = (
                round(result[key]["audit_bytes_last"] / admitted) if admitted else None)
    if len(tallies) == 2:
        print(table(tallies["on"], tallies["off"], args.row_s))
        on, off = result["with_retention"], result["without_retention"]
        grow = off["slope_second_half_bytes_per_min"]
        rest = off["besides_audit_slope_second_half_bytes_per_min"]
        # A slope needs a few samples past the first retention window: a shorter run
        # (--minutes 0.5 with 20 s windows) shows the table but judges nothing.
        judged = min(on["second_half_samples"], off["second_half_samples"]) >= 3
        result["flat"] = (grow > 0 and on["slope_second_half_bytes_per_min"] < 0.1 * grow
                          if judged else None)
        # The same test for all but the audit log, which no retention shortens.
        result["flat_besides_audit"] = (
            rest > 0 and on["besides_audit_slope_second_half_bytes_per_min"] < 0.1 * rest
            if judged else None)
    for key in ("with_retention", "without_retention"):
        if key in result:
            r = result[key]
            print(f"{key}: not 2xx {r['not_2xx'] or 'none'}; refused as meant "
                  f"{r['refused_as_meant']}; dropped arrivals {r['dropped_arrivals']}; "
                  f"job outcomes {r['outcomes']}; daemon warnings {r['daemon_warnings'] or 'none'}")
    if result.get("flat") is None and len(tallies) == 2:
        print(f"flat: not judged (fewer than 3 samples past {settle:g} s and the half-way "
              "mark: a longer --minutes, or a shorter --keep-s)")
    elif "flat" in result:
        print(f"flat: {result['flat']} (second-half slope {on['slope_second_half_bytes_per_min']} "
              f"B/min with retention, {grow} B/min without); besides the audit log: "
              f"{result['flat_besides_audit']} "
              f"({on['besides_audit_slope_second_half_bytes_per_min']} against {rest} B/min); "
              f"the audit log, never removed, {on['audit_bytes_per_job']} B per job with "
              f"retention, {off['audit_bytes_per_job']} without")
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()

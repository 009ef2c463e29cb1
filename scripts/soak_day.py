"""The compressed day that ``scripts/bench soak`` runs (the default; ``--compare`` is
the older retention on/off comparison in bench_soak.py).

One daemon on loopback, for ``--minutes`` (10 by default here; hours on a real box),
with every ``[retention]`` window a few seconds and the day's traffic, paced at
``--rate`` arrivals a second:

- the mix of bench_soak.py: ``sign_case`` (with and without evidence), kiosk requests,
  invoices, refused documents as jobs and on the kiosk;
- transient failures that succeed on a retry (the test kind's ``fail_transient``);
- cancels (a job scheduled for later, then canceled), holds placed and lifted later,
  and erasures of recent cases;
- a backup every ``--backup-every-s``, restored into a new directory and checked
  (``store check``, ``audit verify``) while the daemon runs;
- a SIGHUP at a third of the day and a ``kill -9`` with a restart at two thirds.

Every ``--sample-s`` it samples the live bytes of each area on disk (objects/,
artifacts/, and the SQLite file's used pages, with its free pages and its WAL counted
apart), the daemon's RSS, open file descriptors and event-loop tasks, the temp files
left, and the oldest queued job's age. It ends with a table, a PNG chart of those
series over time (``--chart``; matplotlib, of the bench extra), and as its last line
one JSON object: the slopes after warm-up, backups taken and restored, leaks (temp
files left once the daemon stopped), and whether the audit chain and the store check
out at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib.soak import (  # noqa: E402  (scripts/, beside this file)
    MIX,
    MiB,
    Mix,
    Tally,
    audit_bytes,
    contract_template,
    parse_metrics,
    slope_per_min,
)

from tests.daemon import Daemon  # noqa: E402

# The day's arrivals besides the soak's mix (benchlib.soak.MIX; weights).
DAY = {**MIX, "transient": 6, "cancel": 3, "hold": 2, "erase": 2}
# Series a sample holds, for the table, the chart and the slopes.
SERIES = ("objects", "artifacts", "store_live", "audit", "store_rest", "store_free", "wal",
          "rss_mb", "fds", "tasks", "temp_files", "oldest_queued_s")


def _walk_bytes(root: Path) -> int:
    """Bytes under ``root``, a hard-linked file once."""
    seen: set[int] = set()
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                st = os.lstat(os.path.join(dirpath, f))
                if st.st_ino not in seen:
                    seen.add(st.st_ino)
                    total += st.st_size
    return total


def store_bytes(db: Path) -> dict[str, int]:
    """The SQLite file's used pages (the audit log's, never removed, and the rest's),
    its free pages and its WAL, apart."""
    out = {"store_live": 0, "store_free": 0, "wal": 0}
    with contextlib.suppress(OSError):
        out["wal"] = Path(f"{db}-wal").stat().st_size
    with contextlib.suppress(sqlite3.Error, OSError), contextlib.closing(
            sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
        size = db.stat().st_size
        free = c.execute("PRAGMA freelist_count").fetchone()[0] * \
            c.execute("PRAGMA page_size").fetchone()[0]
        out["store_live"], out["store_free"] = size - free, free
    out["audit"] = audit_bytes(db)
    out["store_rest"] = out["store_live"] - out["audit"]
    return out


def files_under(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of ``pid``."""
    rss = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = 0
    with contextlib.suppress(OSError):
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss / 1024, fds


class Day:
    """The day's state: the daemon, its traffic, its events and its samples."""

    def __init__(self, d: Daemon, args: argparse.Namespace, template: bytes) -> None:
        self.d, self.args = d, args
        self.tally = Tally()
        self.template = template
        self.mix: Mix  # made in run(): its session needs the running loop
        self.samples: list[dict[str, Any]] = []
        self.events: list[tuple[float, str]] = []
        self.cases: list[str] = []  # recent cases, for holds and erasures
        self.counts: dict[str, int] = {k: 0 for k in (
            "backups_taken", "backups_restored", "backups_failed", "restores_checked",
            "holds", "erasures", "cancels", "transients", "sighup", "kill9_restarts")}
        self.backup_lines: list[str] = []
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    # --- the day's arrivals -------------------------------------------------------

    async def arrival(self, what: str) -> None:
        import aiohttp

        s, url = self.mix.session, self.d.url
        try:
            if what in MIX:
                before = self.mix.n
                await self.mix.one(what)
                self.cases.append(f"SOAK-day-{before + 1}")
                del self.cases[:-50]
            elif what == "transient":
                body = {"kind": "test", "behavior": "fail_transient", "fail_times": 2,
                        "tag": f"t{random.random()}"}
                async with s.post(f"{url}/v1/jobs", json=body) as r:
                    self.counts["transients"] += r.status == 202
            elif what == "cancel":
                # Canceled at once: 200 while it waits, 409 not_cancelable when a worker
                # took it first (the day goes on either way).
                body = {"kind": "test", "tag": f"c{random.random()}", "sleep_ms": 50}
                async with s.post(f"{url}/v1/jobs", json=body) as r:
                    job = await r.json() if r.status == 202 else None
                if job:
                    async with s.post(f"{url}/v1/jobs/{job['job_id']}/cancel") as r:
                        self.counts["cancels"] += r.status == 200
            elif what == "hold" and self.cases:
                case = random.choice(self.cases)
                async with s.post(f"{url}/v1/cases/{case}/hold") as r:
                    if r.status in (200, 201):
                        self.counts["holds"] += 1
                        await asyncio.sleep(self.args.keep_s)  # held past its windows
                        async with s.delete(f"{url}/v1/cases/{case}/hold"):
                            pass
            elif what == "erase" and self.cases:
                case = self.cases.pop(random.randrange(len(self.cases)))
                async with s.delete(f"{url}/v1/cases/{case}") as r:
                    # 404: retention took it first; 409: held, or a job of it runs.
                    self.counts["erasures"] += r.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            self.tally.unexpected[f"{what} no answer {type(e).__name__}"] += 1

    # --- the day's events ----------------------------------------------------------

    def backup_round(self, n: int) -> None:
        """A backup of the running daemon, restored into a new directory and checked
        there (blocking: run in a thread)."""
        work = self.d.dir.parent / f"backup-{n}"
        bk, new = work / "bk", work / "restored"
        try:
            made = self.d.cli("backup", "--to", str(bk), "--config", str(self.d.config_path))
            if made.returncode:
                self.counts["backups_failed"] += 1
                self.backup_lines.append(f"backup {n}: {made.stderr.strip()[-300:]}")
                return
            self.counts["backups_taken"] += 1
            done = self.d.cli("restore", "--from", str(bk), "--dir", str(new))
            if done.returncode:
                self.backup_lines.append(f"restore {n}: {(done.stderr + done.stdout)[-300:]}")
                return
            self.counts["backups_restored"] += 1
            config = str(new / "config.toml")
            checks = [self.d.cli("store", "check", "--config", config),
                      self.d.cli("audit", "verify", "--config", config)]
            if all(c.returncode == 0 for c in checks):
                self.counts["restores_checked"] += 1
            else:
                self.backup_lines.append(f"check {n}: {checks[0].stdout[-300:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def sample(self) -> dict[str, Any]:
        d = self.d
        metrics: dict[str, Any] = {"jobs": {}}
        tasks = oldest = 0.0
        with contextlib.suppress(Exception):
            async with self.mix.session.get(f"{d.url}/metrics") as r:
                text = await r.text()
            metrics = parse_metrics(text)
            for line in text.splitlines():
                if line.startswith("casesignd_event_loop_tasks "):
                    tasks = float(line.split()[1])
                elif line.startswith("casesignd_oldest_queued_job_age_seconds "):
                    oldest = float(line.split()[1])
        assert d.proc is not None
        rss, fds = proc_figures(d.proc.pid)

        def disk() -> dict[str, int]:
            return {"objects": _walk_bytes(d.dir / "objects"),
                    "artifacts": _walk_bytes(d.dir / "artifacts"), **store_bytes(d.db),
                    "temp_files": files_under(d.temp_area)}

        s = {"t": self.now(), "admitted": self.tally.admitted, **await asyncio.to_thread(disk),
             "rss_mb": round(rss, 1), "fds": fds, "tasks": tasks, "oldest_queued_s": oldest,
             "job_rows": sum(metrics["jobs"].values())}
        self.samples.append(s)
        return s

    async def run(self) -> None:
        args = self.args
        self.mix = Mix(self.d, self.template, self.tally, "day")
        duration = args.minutes * 60
        kinds, weights = list(DAY), list(DAY.values())
        rng = random.Random(11)
        inflight: set[asyncio.Task[None]] = set()
        backups: list[asyncio.Future[None]] = []
        next_sample = next_backup = self.t0
        next_at, sighup_at, kill_at = self.t0, self.t0 + duration / 3, self.t0 + 2 * duration / 3
        try:
            while (now := time.monotonic()) < self.t0 + duration:
                if now >= next_sample:
                    s = await self.sample()
                    print(f"  t={s['t']:>6}s admitted={s['admitted']} live="
                          f"{(s['objects'] + s['artifacts'] + s['store_live']) / MiB:.1f} MiB "
                          f"rss={s['rss_mb']:.0f} MiB fds={s['fds']} tasks={s['tasks']:.0f}",
                          file=sys.stderr)
                    next_sample += args.sample_s
                if now >= next_backup and now > self.t0 + args.keep_s:
                    n = self.counts["backups_taken"] + self.counts["backups_failed"] + len(backups)
                    if not any(not b.done() for b in backups):  # one at a time
                        backups.append(asyncio.ensure_future(asyncio.to_thread(self.backup_round, n)))
                    next_backup = now + args.backup_every_s
                if sighup_at and now >= sighup_at:
                    self.d.signal(signal.SIGHUP)
                    self.counts["sighup"] += 1
                    self.events.append((self.now(), "SIGHUP"))
                    sighup_at = 0.0
                if kill_at and now >= kill_at:
                    # Outside a backup: restore is checked against a live store, not a
                    # process that died in the middle of copying it.
                    for b in backups:
                        await b
                    self.d.kill9()
                    self.events.append((self.now(), "kill -9"))
                    await asyncio.to_thread(self.d.start)
                    self.counts["kill9_restarts"] += 1
                    kill_at = 0.0
                    continue
                if next_at > now:
                    await asyncio.sleep(min(next_at, next_sample) - now)
                    continue
                next_at += 1 / args.rate
                if len(inflight) >= args.max_inflight:
                    self.tally.dropped += 1
                    continue
                task = asyncio.create_task(self.arrival(rng.choices(kinds, weights)[0]))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
            if inflight:
                await asyncio.wait(inflight, timeout=90)
            for b in backups:
                await b
            await self.sample()
        finally:
            for t in inflight:
                t.cancel()
            await self.mix.session.close()


# --- figures -------------------------------------------------------------------------


def slope_by_process(points: list[tuple[float, float]], breaks: list[float]) -> float:
    """The slope of ``points`` within each daemon process's life (split at ``breaks``,
    the restarts), weighted by how long each ran: a restart's step (a new process's
    own baseline of descriptors and tasks) is no growth (pure)."""
    edges = [float("-inf"), *sorted(breaks), float("inf")]
    total = weight = 0.0
    for lo, hi in itertools.pairwise(edges):
        part = [(t, y) for t, y in points if lo <= t < hi]
        if len(part) >= 3:
            span = part[-1][0] - part[0][0]
            total += slope_per_min(part) * span
            weight += span
    return total / weight if weight else 0.0


def figures(day: Day, warmup_s: float) -> dict[str, Any]:
    late = [s for s in day.samples if s["t"] >= warmup_s]
    breaks = [t for t, what in day.events if what == "kill -9"]

    def slope(key: str) -> float:
        return round(slope_by_process([(s["t"], s[key]) for s in late], breaks), 2)

    live = [(s["t"], s["objects"] + s["artifacts"] + s["store_rest"]) for s in late]
    last = day.samples[-1]
    return {
        "samples": len(day.samples), "after_warmup": len(late), "warmup_s": warmup_s,
        "admitted": day.tally.admitted, "dropped_arrivals": day.tally.dropped,
        "sent": dict(day.tally.sent), **day.counts,
        # Live bytes besides the audit log, which is never removed (its own slope, in
        # slopes_per_min["audit"], is the figure to plan the store's disk by).
        "live_bytes_slope_per_min": round(slope_by_process(live, breaks)),
        "slopes_per_min": {k: slope(k) for k in SERIES},
        "last": {k: last[k] for k in SERIES},
        "max": {k: max(s[k] for s in day.samples) for k in SERIES},
        "outcomes": dict(sorted(day.tally.outcomes.items())),
        "not_2xx": dict(sorted(day.tally.unexpected.items())),
        "events": day.events, "backup_problems": day.backup_lines,
    }


def table(day: Day, row_s: float) -> str:
    head = (f"{'t':>7} {'jobs':>6} {'objects':>8} {'artifacts':>9} {'store':>7} {'audit':>6} "
            f"{'free':>6} "
            f"{'wal':>6} {'rss':>5} {'fds':>4} {'tasks':>5} {'tmp':>4} {'oldest':>6}")
    lines = [head]
    shown = -1.0
    for s in day.samples:
        if s["t"] - shown < row_s and s is not day.samples[-1]:
            continue
        shown = s["t"]
        lines.append(f"{s['t']:>6.0f}s {s['admitted']:>6} {s['objects'] / MiB:>8.2f} "
                     f"{s['artifacts'] / MiB:>9.2f} {s['store_live'] / MiB:>7.2f} "
                     f"{s['audit'] / MiB:>6.2f} "
                     f"{s['store_free'] / MiB:>6.2f} {s['wal'] / MiB:>6.2f} {s['rss_mb']:>5.0f} "
                     f"{s['fds']:>4} {s['tasks']:>5.0f} {s['temp_files']:>4} "
                     f"{s['oldest_queued_s']:>6.1f}")
    lines.append("MiB: objects/ and artifacts/ (a hard-linked blob once), the SQLite file's "
                 "used pages (store; audit: the audit log's share, never removed), its free "
                 "pages and its WAL; rss MiB; fds and tasks of "
                 "the daemon; tmp: files in its temp area; oldest: the oldest queued job, s")
    return "\n".join(lines)


def chart(day: Day, path: Path) -> bool:
    """The series over time as a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s["t"] / 60 for s in day.samples]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for key in ("objects", "artifacts", "store_rest", "audit", "store_free", "wal"):
        axes[0].plot(t, [s[key] / MiB for s in day.samples], label=key)
    axes[0].set_ylabel("MiB on disk")
    axes[1].plot(t, [s["rss_mb"] for s in day.samples], label="RSS MiB")
    axes[1].plot(t, [s["fds"] for s in day.samples], label="open fds")
    axes[1].plot(t, [s["tasks"] for s in day.samples], label="event-loop tasks")
    axes[2].plot(t, [s["temp_files"] for s in day.samples], label="temp files")
    axes[2].plot(t, [s["oldest_queued_s"] for s in day.samples], label="oldest queued, s")
    axes[2].set_xlabel("minutes")
    for ax in axes:
        for at, what in day.events:
            ax.axvline(at / 60, color="grey", linestyle=":", linewidth=1)
            if ax is axes[0]:
                ax.annotate(what, (at / 60, 0), rotation=90, fontsize=7, color="grey")
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"casesignd soak: a compressed day, {day.args.minutes:g} min, "
                 f"retention {day.args.keep_s:g} s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="the day's length")
    ap.add_argument("--rate", type=float, default=6.0, help="arrivals a second, all kinds")
    ap.add_argument("--keep-s", type=float, default=20.0, help="every [retention] window")
    ap.add_argument("--sweep-s", type=float, default=3.0, help="retention.sweep_interval_s")
    ap.add_argument("--backup-every-s", type=float, default=120.0)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--row-s", type=float, default=60.0, help="a table row this often")
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-inflight", type=int, default=100)
    ap.add_argument("--chart", default="soak.png", help="where the PNG goes ('' for none)")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-soak-day-", dir=args.dir))
    keep = args.keep_s
    d: Daemon | None = None
    try:
        d = Daemon(work / "day", {
            "retention": {"objects_s": keep, "artifacts_s": keep, "jobs_s": 2 * keep,
                          "rejected_s": keep, "sweep_interval_s": args.sweep_s},
            "workers": {"concurrency": args.workers},
            "storage": {"temp_dir": str(work / "tmp")}},
            env={"PYTHONPATH": str(ROOT)}, strict_labels=False)
        day = Day(d, args, contract_template(args.pages))
        print(f"soak: a day of {args.minutes:g} min, retention {keep:g} s", file=sys.stderr)
        d.start()
        day.t0 = time.monotonic()
        asyncio.run(day.run())
        code = d.stop(timeout_s=60)
        # Leaks: what the daemon left in its temp area once it stopped.
        leaks = files_under(d.temp_area)
        check = d.cli("store", "check", "--config", str(d.config_path))
        verify = d.cli("audit", "verify", "--config", str(d.config_path))
        warmup = max(2 * keep + 2 * args.sweep_s, args.minutes * 60 / 5)
        result = {"bench": "soak_day", "minutes": args.minutes, "rate": args.rate,
                  "keep_s": keep, "cpus": os.cpu_count(), **figures(day, warmup),
                  "leaks": leaks, "exit_code": code, "store_check_ok": check.returncode == 0,
                  "chain_ok": verify.returncode == 0}
        if check.returncode or verify.returncode:
            # What was found, for whoever reads a failed day's JSON line.
            result["check_said"] = (check.stdout + check.stderr)[-2000:]
            result["verify_said"] = (verify.stdout + verify.stderr)[-1000:]
    finally:
        if d is not None and d.proc is not None and d.proc.poll() is None:
            d.stop(timeout_s=60)  # a day that failed half way: its daemon goes with it
        shutil.rmtree(work, ignore_errors=True)
    print(table(day, args.row_s))
    if args.chart and chart(day, Path(args.chart)):
        print(f"chart: {args.chart}")
    print(f"backups taken {result['backups_taken']}, restored {result['backups_restored']}, "
          f"checked {result['restores_checked']}; leaks {leaks}; chain "
          f"{'intact' if result['chain_ok'] else 'BROKEN'}; store check "
          f"{'passes' if result['store_check_ok'] else 'FAILS'}; live bytes "
          f"{result['live_bytes_slope_per_min']} B/min (the audit log "
          f"{result['slopes_per_min']['audit']:.0f} B/min) and RSS "
          f"{result['slopes_per_min']['rss_mb']} MiB/min after warm-up")
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])

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
import contextlib
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.daemon import Daemon, multipart  # noqa: E402

MiB = 1024 * 1024
SIGNERS = [{"id": "seller-1", "name": "Acme Ltd", "role": "seller"}]
# What one arrival is, and how often (weights of the mix).
MIX = {"sign_case": 35, "sign_case_evidence": 15, "kiosk": 25, "invoice": 15,
       "refused_job": 5, "refused_kiosk": 5}
# Written into each contract's uncompressed text and replaced by a unique id of the
# same length, so every document is new bytes without moving the xref offsets.
MARK = b"SOAK-" + b"0" * 32
# Looks like a PDF to the upload (the header) but has no body: the worker refuses it.
MALFORMED = b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\ntrailer\n%%EOF\n"
PNG_SIDE = 48


def contract_template(pages: int) -> bytes:
    """A contract of ``pages`` pages of uncompressed text with :data:`MARK` on the first."""
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4, pageCompression=0, invariant=1)
    for p in range(pages):
        c.drawString(60, 810, MARK.decode() if p == 0 else f"page {p + 1}")
        for line in range(40):
            c.drawString(60, 780 - 18 * line, f"Clause {p + 1}.{line + 1}: the parties agree "
                                              "to the terms set out in this contract.")
        c.showPage()
    c.save()
    data = buf.getvalue()
    assert data.count(MARK) == 1
    return data


def png(seed: int) -> bytes:
    """A small PNG of its own pixels (no image library needed)."""
    import struct
    import zlib

    rnd = random.Random(seed)
    raw = b"".join(b"\x00" + rnd.randbytes(PNG_SIDE * 3) for _ in range(PNG_SIDE))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", PNG_SIDE, PNG_SIDE, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def item(role: str, name: str, media: str, data: bytes) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    return {"role": role, "name": name, "media_type": media, "object_ref": f"sha256:{sha}",
            "sha256": sha, "size": len(data)}


# --- measuring ----------------------------------------------------------------------


def state_bytes(state: Path, db: Path) -> dict[str, int]:
    """Bytes under objects/ and artifacts/ (a hard-linked blob once) and of the
    SQLite files: what the state directory holds, as ``du --apparent-size`` would."""
    out = {}
    for area in ("objects", "artifacts"):
        seen: set[int] = set()
        total = 0
        for dirpath, _, files in os.walk(state / area):
            for f in files:
                with contextlib.suppress(OSError):  # removed by a sweep meanwhile
                    st = os.lstat(os.path.join(dirpath, f))
                    if st.st_ino not in seen:
                        seen.add(st.st_ino)
                        total += st.st_size
        out[area] = total
    out["store"] = sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
                       if p.exists())
    out["total"] = out["objects"] + out["artifacts"] + out["store"]
    out["audit"] = audit_bytes(db)
    return out


def audit_bytes(db: Path) -> int:
    """Pages of the audit log (the events table and its indexes) in the SQLite file:
    the part of the store that retention never removes (CONTRACT: audit events stay)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                                                timeout=1)) as c:
            row = c.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM "
                            "sqlite_master WHERE tbl_name = 'events')").fetchone()
    except sqlite3.Error:  # no dbstat in this SQLite build, or the file is busy
        return 0
    return int(row[0] or 0)


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and every process below it (its CPU worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(text[text.rindex(")") + 2:].split()[1]), []).append(
                    int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_kib(p)
        todo.extend(children.get(p, ()))
    return total


def parse_metrics(text: str) -> dict[str, Any]:
    """The gauges this bench follows, out of the Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    disk: dict[str, int] = {}
    removed: dict[str, int] = {}
    jobs: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "casesignd_disk_bytes":
                disk[s.labels["area"]] = int(s.value)
            elif s.name == "casesignd_removed_total":
                removed[f"{s.labels['what']}/{s.labels['reason']}"] = int(s.value)
            elif s.name == "casesignd_jobs":
                jobs[s.labels["state"]] = int(s.value)
    return {"disk": disk, "removed": removed, "jobs": jobs}


# --- the mix --------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw in one configuration."""

    admitted: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    # Answers that were not 2xx, as "route status code"; the deliberate refusals apart.
    unexpected: Counter[str] = field(default_factory=Counter)
    refused_as_meant: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # "kind state" of polled jobs
    dropped: int = 0  # arrivals not sent: too many already in flight
    samples: list[dict[str, Any]] = field(default_factory=list)


class Mix:
    def __init__(self, d: Daemon, template: bytes, tally: Tally, tag: str) -> None:
        import aiohttp

        self.url = d.url
        self.template = template
        self.tally = tally
        self.tag = tag
        self.n = 0
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {d.token}"},
            connector=aiohttp.TCPConnector(limit=32),
            timeout=aiohttp.ClientTimeout(total=60))

    def fresh(self) -> tuple[str, bytes]:
        """A new case id and a contract of new bytes."""
        self.n += 1
        uid = uuid.uuid4().hex
        return f"SOAK-{self.tag}-{self.n}", self.template.replace(MARK, f"SOAK-{uid}".encode())

    async def _answer(self, route: str, r: Any, meant: int | None = None) -> Any:
        body = await r.read()
        code = ""
        if r.status >= 300:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                code = json.loads(body)["error"]["code"]
            key = f"{route} {r.status} {code}".strip()
            (self.tally.refused_as_meant if r.status == meant else self.tally.unexpected)[key] += 1
            return None
        return json.loads(body) if r.content_type == "application/json" else body

    async def upload(self, case: str, data: bytes, media: str) -> bool:
        sha = hashlib.sha256(data).hexdigest()
        async with self.session.put(f"{self.url}/v1/cases/{case}/objects/{sha}", data=data,
                                    headers={"Content-Type": media}) as r:
            return await self._answer("PUT object", r) is not None

    async def job(self, kind: str, body: dict[str, Any], meant_to_fail: bool = False) -> None:
        async with self.session.post(f"{self.url}/v1/jobs", json=body) as r:
            job = await self._answer("POST /v1/jobs", r)
        if job is None:
            return
        self.tally.admitted += 1
        # Poll slowly: the bench watches outcomes, it must not become the load itself.
        await asyncio.sleep(0.5)
        for _ in range(120):
            async with self.session.get(f"{self.url}/v1/jobs/{job['job_id']}") as r:
                view = await self._answer("GET /v1/jobs/{id}", r)
            if view is None:
                return
            if view["state"] in ("ready", "failed", "canceled"):
                meant = meant_to_fail and view["state"] == "failed"
                self.tally.outcomes[f"{kind} {view['state']}{' (meant)' if meant else ''}"] += 1
                return
            await asyncio.sleep(1.0)
        self.tally.outcomes[f"{kind} unfinished"] += 1

    async def kiosk(self, case: str, document: bytes, meant: int | None = None) -> None:
        body, ctype = multipart({"case_id": case, "signers": SIGNERS}, document)
        async with self.session.post(f"{self.url}/v1/sign", data=body,
                                     headers={"Content-Type": ctype}) as r:
            ok = await self._answer("POST /v1/sign", r, meant) is not None
        if ok or r.status == meant:  # a refused kiosk request is a job row too
            self.tally.admitted += 1

    async def one(self, what: str) -> None:
        import aiohttp

        self.tally.sent[what] += 1
        try:
            await self._one(what)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            # No answer at all is a failure of the soak too: counted with the others.
            self.tally.unexpected[f"{what} no answer {type(e).__name__}"] += 1

    async def _one(self, what: str) -> None:
        case, contract = self.fresh()
        if what in ("sign_case", "sign_case_evidence", "refused_job"):
            doc = MALFORMED + uuid.uuid4().hex.encode() if what == "refused_job" else contract
            items = [item("contract", "contract.pdf", "application/pdf", doc)]
            uploads = [(doc, "application/pdf")]
            if what == "sign_case_evidence":
                photo = png(self.n)
                items.append(item("evidence", "photo.png", "image/png", photo))
                uploads.append((photo, "image/png"))
            for data, media in uploads:
                if not await self.upload(case, data, media):
                    return
            await self.job("sign_case", {"kind": "sign_case", "case_id": case, "items": items,
                                         "signers": SIGNERS}, what == "refused_job")
        elif what == "kiosk":
            await self.kiosk(case, contract)
        elif what == "refused_kiosk":
            await self.kiosk(case, MALFORMED + uuid.uuid4().hex.encode(), meant=422)
        else:
            order = {"order_id": case, "student_name": "Avery Chen", "currency": "USD",
                     "items": [{"description": f"Course module {k + 1}", "quantity": 1 + k % 3,
                                "unit_price": f"{10 + k}.50"} for k in range(1 + self.n % 5)]}
            await self.job("render_invoice", {"kind": "render_invoice", "sign": self.n % 2 == 0,
                                              "template_version": "invoice-v3", "order": order})


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


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes), in bytes a minute (pure)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return 60 * sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


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
    if "--compare" not in sys.argv[1:]:
        import soak_day

        soak_day.main(sys.argv[1:])
        return
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

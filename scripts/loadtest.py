#!/usr/bin/env python3
"""Open-loop load test: where does latency accumulate as the arrival rate grows?

Starts its own daemon (``tests.daemon.Daemon``: a fresh ``casesignd init`` state in a
temporary directory, loopback only) with a fixed worker pool, then offers a
realistic mix at increasing arrival rates. Arrivals are a seeded Poisson process that
never waits for answers (open loop), so a saturated daemon shows as queueing rather
than as a slower client. The mix:

- ``kiosk``: ``POST /v1/sign`` of a one-page contract (skipped, and said so, when the
  daemon has no ``/v1/sign``);
- ``case_small``: a one-page contract with a photo and a note;
- ``case_100p``: a 100-page contract;
- ``case_big``: a packet of a few MB (a 4 MiB contract and a 1 MiB photo);
- ``invoice_1`` / ``invoice_30``: signed invoices of 1 and 30 lines.

Case documents come from a ``dir`` source, so every job fetches, validates, scans,
signs and publishes without an upload per job; every job has its own case or order ID,
so none is answered from an earlier signature.

Two jobs of each type warm the daemon up first (CPU processes, imports, fonts) and
are not counted. After each step's arrivals the script waits for that step's jobs to finish, then reads
each job's ``timings`` (the daemon's own clocks: ``admission_ms``, ``queue_wait_ms``,
``processing_ms``). Per step it prints p50/p95/p99 of each clock and the share of the
total spent queueing and processing; it saves the same as a PNG chart and prints, as
its last line, one JSON object with every figure.

    scripts/loadtest [--rates 10,20,40,80] [--step-s 8] [--concurrency 4]
                     [--max-jobs 1000] [--budget-s 170] [--chart loadtest.png] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemon import Daemon  # noqa: E402
from tests.helpers_pki import big_pdf, reportlab_pdf  # noqa: E402

CLOCKS = ("admission_ms", "queue_wait_ms", "processing_ms")
FINAL = ("ready", "failed", "canceled")
SIGNERS = [{"id": "seller-1", "name": "Seller Ltd", "role": "seller"},
           {"id": "buyer-1", "name": "Buyer Person", "role": "buyer"}]
# Shares of the offered load; kiosk's share goes to the others when it is absent.
MIX = {"kiosk": 0.15, "case_small": 0.30, "case_100p": 0.08, "case_big": 0.02,
       "invoice_1": 0.35, "invoice_30": 0.10}
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
       b"\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00"
       b"\x00IEND\xaeB`\x82")


# --- figures (pure) --------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def distribution(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": _round(percentile(values, q)) for q in (50, 95, 99)}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def shares(timings: list[dict[str, float]]) -> dict[str, float | None]:
    """Where the summed latency of ``timings`` went: admission, queueing, processing."""
    sums = {c: sum(t.get(c, 0.0) for t in timings) for c in CLOCKS}
    whole = sum(sums.values())
    return {c.removesuffix("_ms"): (round(v / whole, 3) if whole else None) for c, v in sums.items()}


def step_figures(rate: float, arrivals_s: float, drained_s: float, jobs: list[Job],
                 kiosk: list[KioskCall]) -> dict[str, Any]:
    """Everything one step reports, from its finished jobs and kiosk calls."""
    done = [j for j in jobs if j.resource and j.resource["state"] in FINAL]
    timings = [j.resource["timings"] for j in done if j.resource.get("timings")]
    timings += [k.timings for k in kiosk if k.timings]
    rejected = Counter(j.code for j in jobs if j.status not in (200, 202))
    rejected.update(k.code for k in kiosk if k.status != 200)
    failed = Counter(j.resource.get("error", {}).get("code") for j in done
                     if j.resource["state"] == "failed")
    out: dict[str, Any] = {
        "rate_per_s": rate,
        "offered": len(jobs) + len(kiosk),
        "offered_per_s": round((len(jobs) + len(kiosk)) / arrivals_s, 2) if arrivals_s else None,
        "accepted": sum(1 for j in jobs if j.status in (200, 202)) + sum(
            1 for k in kiosk if k.status == 200),
        "rejected": dict(rejected),
        "succeeded": sum(1 for j in done if j.resource["state"] == "ready") + sum(
            1 for k in kiosk if k.status == 200),
        "failed": dict(failed),
        "unfinished": sum(1 for j in jobs if j.status in (200, 202) and j not in done),
        "completed_per_s": round(len(done) / drained_s, 2) if drained_s else None,
    }
    for clock in CLOCKS:
        out[clock] = distribution([t[clock] for t in timings if clock in t])
    out["total_ms"] = distribution([sum(t.get(c, 0.0) for c in CLOCKS) for t in timings])
    out["share"] = shares(timings)
    by_type: dict[str, Any] = {}
    for name in sorted({j.type for j in jobs} | {"kiosk" for _ in kiosk[:1]}):
        ts = [j.resource["timings"] for j in done if j.type == name and j.resource.get("timings")]
        if name == "kiosk":
            ts = [k.timings for k in kiosk if k.timings]
        by_type[name] = {"n": len(ts), "processing_ms_p50": _round(percentile(
            [t["processing_ms"] for t in ts], 50)), "total_ms_p95": _round(percentile(
            [sum(t.get(c, 0.0) for c in CLOCKS) for t in ts], 95))}
    if kiosk:
        by_type["kiosk"]["client_ms"] = distribution([k.client_ms for k in kiosk if k.status == 200])
    out["by_type"] = by_type
    return out


# --- traffic -------------------------------------------------------------------------


@dataclass
class Job:
    type: str
    status: int = 0
    code: str | None = None
    job_id: str | None = None
    resource: dict[str, Any] | None = None


@dataclass
class KioskCall:
    status: int = 0
    code: str | None = None
    client_ms: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Corpus:
    """The documents the mix uses, in the daemon's ``dir`` source named ``lt``."""

    items: dict[str, dict[str, Any]]
    kiosk_pdf: bytes

    @classmethod
    def make(cls, root: Path) -> Corpus:
        root.mkdir(parents=True, exist_ok=True)
        reportlab_pdf(root / "contract-1p.pdf", pages=1, text="Sales contract")
        reportlab_pdf(root / "contract-100p.pdf", pages=100, text="Framework agreement")
        big_pdf(root / "contract-4mb.pdf", 4 * 1024 * 1024)
        (root / "photo.png").write_bytes(PNG)
        (root / "note.txt").write_bytes(b"Delivered on time; photo attached.\n")
        (root / "scan-1mb.txt").write_bytes(b"scanned delivery log line\n" * 40330)
        items = {}
        for p in root.iterdir():
            data = p.read_bytes()
            items[p.name] = {"object_ref": f"lt:{p.name}", "sha256": hashlib.sha256(data).hexdigest(),
                             "size": len(data)}
        return cls(items, (root / "contract-1p.pdf").read_bytes())

    def case(self, case_id: str, contract: str, evidence: list[tuple[str, str]]) -> dict[str, Any]:
        items = [{"role": "contract", "name": contract, "media_type": "application/pdf",
                  **self.items[contract]}]
        items += [{"role": "evidence", "name": n, "media_type": m, **self.items[n]}
                  for n, m in evidence]
        return {"kind": "sign_case", "case_id": case_id, "items": items, "signers": SIGNERS}


def invoice(order_id: str, lines: int) -> dict[str, Any]:
    items = [{"description": f"Course module {i + 1}: laboratory practice",
              "quantity": 1 + i % 3, "unit_price": f"{19 + i}.50"} for i in range(lines)]
    return {"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
            "order": {"order_id": order_id, "student_name": "Load Test Student",
                      "currency": "USD", "items": items}}


def body_for(kind: str, n: int, corpus: Corpus) -> dict[str, Any]:
    uid = f"LT-{n:06d}"
    if kind == "case_small":
        return corpus.case(uid, "contract-1p.pdf", [("photo.png", "image/png"),
                                                    ("note.txt", "text/plain")])
    if kind == "case_100p":
        return corpus.case(uid, "contract-100p.pdf", [("note.txt", "text/plain")])
    if kind == "case_big":
        return corpus.case(uid, "contract-4mb.pdf", [("scan-1mb.txt", "text/plain")])
    return invoice(uid, 1 if kind == "invoice_1" else 30)


class Load:
    """One daemon, one HTTP session, and the calls of the running step."""

    def __init__(self, d: Daemon, corpus: Corpus, session: aiohttp.ClientSession) -> None:
        self.d = d
        self.corpus = corpus
        self.http = session
        self.auth = {"Authorization": f"Bearer {d.token}"}
        self.n = 0

    async def kiosk_available(self) -> bool:
        # An empty form cannot sign anything: only a missing route answers 404.
        async with self.http.post(self.d.url + "/v1/sign", headers=self.auth,
                                  data=aiohttp.FormData({"x": "y"})) as r:
            return r.status != 404

    async def submit(self, kind: str, job: Job) -> None:
        self.n += 1
        async with self.http.post(self.d.url + "/v1/jobs", headers=self.auth,
                                  json=body_for(kind, self.n, self.corpus)) as r:
            job.status = r.status
            data = await r.json(content_type=None)
        if r.status in (200, 202):
            job.job_id = data["job_id"]
        else:
            job.code = data.get("error", {}).get("code", str(r.status))

    async def sign(self, call: KioskCall) -> None:
        self.n += 1
        form = aiohttp.FormData()
        form.add_field("manifest", json.dumps({"case_id": f"LT-K-{self.n:06d}", "signers": SIGNERS}),
                       content_type="application/json")
        form.add_field("document", self.corpus.kiosk_pdf, filename="contract.pdf",
                       content_type="application/pdf")
        t = time.perf_counter()
        async with self.http.post(self.d.url + "/v1/sign", headers=self.auth, data=form) as r:
            body = await r.read()
            call.status = r.status
            call.client_ms = (time.perf_counter() - t) * 1000
            job_id = r.headers.get("X-Job-Id")
        if r.status != 200:
            try:
                call.code = json.loads(body)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                call.code = str(r.status)
        elif job_id:
            async with self.http.get(f"{self.d.url}/v1/jobs/{job_id}", headers=self.auth) as r:
                if r.status == 200:
                    call.timings = (await r.json()).get("timings") or {}

    async def poll(self, jobs: list[Job], deadline: float) -> None:
        """Read every accepted job until it is final or ``deadline`` (monotonic) passes."""
        pending = [j for j in jobs if j.job_id]
        gate = asyncio.Semaphore(8)

        async def read(j: Job) -> None:
            async with gate, self.http.get(f"{self.d.url}/v1/jobs/{j.job_id}",
                                           headers=self.auth) as r:
                if r.status == 200:
                    j.resource = await r.json()

        while pending and time.monotonic() < deadline:
            await asyncio.gather(*(read(j) for j in pending))
            pending = [j for j in pending if not (j.resource and j.resource["state"] in FINAL)]
            if pending:
                await asyncio.sleep(0.25)


async def warm_up(load: Load, mix: dict[str, float]) -> None:
    """Two jobs of each type, not measured: the first ones pay for starting the CPU
    processes, imports and font loading, which no later job pays again."""
    jobs: list[Job] = []
    calls = []
    for kind in [k for k in mix for _ in range(2)]:
        if kind == "kiosk":
            calls.append(load.sign(KioskCall()))
        else:
            jobs.append(Job(kind))
            calls.append(load.submit(kind, jobs[-1]))
    await asyncio.gather(*calls, return_exceptions=True)
    await load.poll(jobs, time.monotonic() + 60)


async def run_step(load: Load, rate: float, step_s: float, max_jobs: int, mix: dict[str, float],
                   rng: random.Random, drain_deadline: float) -> dict[str, Any]:
    names, weights = list(mix), list(mix.values())
    jobs: list[Job] = []
    kiosk: list[KioskCall] = []
    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic()
    at = 0.0
    while len(tasks) < max_jobs:
        at += rng.expovariate(rate)
        if at >= step_s:
            break
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        kind = rng.choices(names, weights)[0]
        if kind == "kiosk":
            call = KioskCall()
            kiosk.append(call)
            tasks.append(asyncio.create_task(load.sign(call)))
        else:
            job = Job(kind)
            jobs.append(job)
            tasks.append(asyncio.create_task(load.submit(kind, job)))
    arrivals_s = time.monotonic() - start
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    await load.poll(jobs, drain_deadline)
    out = step_figures(rate, arrivals_s, time.monotonic() - start, jobs, kiosk)
    if errors:
        out["client_errors"] = len(errors)
    return out


# --- output --------------------------------------------------------------------------


def table(steps: list[dict[str, Any]]) -> str:
    head = (f"{'rate/s':>7} {'offered':>7} {'ok':>5} {'rej':>4} {'fail':>4} {'left':>4} "
            f"{'done/s':>7} | {'admission ms p50/p95/p99':>24} | {'queue wait ms p50/p95/p99':>26} "
            f"| {'processing ms p50/p95/p99':>26} | {'queue%':>6} {'proc%':>6}")
    rows = [head, "-" * len(head)]

    def d3(x: dict[str, Any]) -> str:
        return "/".join("-" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}"
                        for v in (x["p50"], x["p95"], x["p99"]))

    for s in steps:
        share = s["share"]
        rows.append(
            f"{s['rate_per_s']:>7g} {s['offered']:>7} {s['succeeded']:>5} "
            f"{sum(s['rejected'].values()):>4} {sum(s['failed'].values()):>4} "
            f"{s['unfinished']:>4} {s['completed_per_s'] or 0:>7.1f} | {d3(s['admission_ms']):>24} | "
            f"{d3(s['queue_wait_ms']):>26} | {d3(s['processing_ms']):>26} | "
            f"{100 * (share['queue_wait'] or 0):>5.0f}% {100 * (share['processing'] or 0):>5.0f}%")
    return "\n".join(rows)


def chart(steps: list[dict[str, Any]], path: Path, title: str) -> bool:
    """p50/p95 of each clock per step (left) and the mean split of latency (right)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{s['rate_per_s']:g}/s" for s in steps]
    x = list(range(len(steps)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for clock, color in zip(CLOCKS, ("tab:green", "tab:orange", "tab:blue"), strict=True):
        name = clock.removesuffix("_ms").replace("_", " ")
        for q, style in (("p50", "--"), ("p95", "-")):
            ys = [s[clock][q] for s in steps]
            left.plot(x, [y if y else None for y in ys], style, color=color, marker="o",
                      label=f"{name} {q}")
    left.set_yscale("log")
    left.set_xticks(x, labels)
    left.set_xlabel("offered arrival rate")
    left.set_ylabel("ms (log)")
    left.set_title("latency per clock")
    left.legend(fontsize=8)
    bottom = [0.0] * len(steps)
    for clock, color in zip(CLOCKS, ("tab:green", "tab:orange", "tab:blue"), strict=True):
        ys = [(s["share"][clock.removesuffix("_ms")] or 0) * 100 for s in steps]
        right.bar(x, ys, bottom=bottom, color=color, label=clock.removesuffix("_ms").replace("_", " "))
        bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
    right.set_xticks(x, labels)
    right.set_ylim(0, 100)
    right.set_ylabel("% of summed job latency")
    right.set_title("where latency accumulated")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# --- main ------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> int:
    started = time.monotonic()
    rates = [float(r) for r in args.rates.split(",") if r]
    state = Path(tempfile.mkdtemp(prefix="casesignd-loadtest-"))
    notes: list[str] = []
    d = None
    try:
        corpus = Corpus.make(state / "source")
        d = Daemon(state / "daemon", {
            "workers": {"concurrency": args.concurrency},
            "logging": {"level": "warning"},
            "sources": [{"name": "lt", "kind": "dir", "root": str(state / "source")}],
        }, test_parts=False)
        d.start()
        connector = aiohttp.TCPConnector(limit=512)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            load = Load(d, corpus, session)
            mix = dict(MIX)
            if not await load.kiosk_available():
                del mix["kiosk"]
                notes.append("POST /v1/sign answered 404: no kiosk traffic in this run")
                print("note: " + notes[-1], file=sys.stderr)
            await warm_up(load, mix)
            rng = random.Random(args.seed)
            steps = []
            for rate in rates:
                left = args.budget_s - (time.monotonic() - started)
                if left < args.step_s + 5:
                    notes.append(f"time budget reached: step {rate:g}/s and later not run")
                    print("note: " + notes[-1], file=sys.stderr)
                    break
                drain_deadline = time.monotonic() + min(args.drain_s, left)
                step = await run_step(load, rate, args.step_s, args.max_jobs, mix, rng,
                                      drain_deadline)
                steps.append(step)
                print(f"step {rate:g}/s: {step['offered']} offered, {step['succeeded']} succeeded, "
                      f"{step['unfinished']} unfinished", file=sys.stderr)
    finally:
        if d is not None:
            d.stop()
        if args.keep:
            print(f"state kept in {state}", file=sys.stderr)
        else:
            shutil.rmtree(state, ignore_errors=True)
    title = (f"casesignd open-loop load: workers.concurrency={args.concurrency}, "
             f"{args.step_s:g} s per step")
    print(title)
    print("mix: " + ", ".join(f"{k} {v:.0%}" for k, v in mix.items()))
    print(table(steps))
    saved = chart(steps, Path(args.chart), title) if steps else False
    if not saved:
        notes.append("matplotlib is not installed: no chart")
    print(f"chart: {args.chart}" if saved else "chart: none (matplotlib missing)")
    for note in notes:
        print("note: " + note)
    print(json.dumps({"benchmark": "loadtest", "concurrency": args.concurrency,
                      "step_s": args.step_s, "mix": mix, "steps": steps,
                      "chart": args.chart if saved else None, "notes": notes},
                     separators=(",", ":")))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="10,20,40,80", help="arrival rates per second, in order")
    p.add_argument("--step-s", type=float, default=8.0, help="seconds of arrivals per step")
    p.add_argument("--max-jobs", type=int, default=1000, help="cap of arrivals per step")
    p.add_argument("--drain-s", type=float, default=60.0, help="wait for a step's jobs at most")
    p.add_argument("--budget-s", type=float, default=170.0, help="stop starting steps after this")
    p.add_argument("--concurrency", type=int, default=4, help="workers.concurrency")
    p.add_argument("--chart", default="loadtest.png", help="PNG chart path")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the daemon's state directory")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

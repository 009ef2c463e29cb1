#!/usr/bin/env python3
"""Invoice rendering benchmark: direct reportlab calls against the process pool.

Renders a one-line and a 300-line invoice (invoice-v3):

- ``direct``: the template's render function called in this process into
  memory, one core: the cost of the layout itself;
- ``pool(N)``: :func:`casesignd.invoice_layout.render_to_file` through a
  ``ProcessPoolExecutor`` of N workers (default 2) writing files, as the worker
  pool runs it: throughput with pickling and file I/O;
- ``admit``: the admission (validation and normalization) per request.

With ``--url URL --token TOKEN`` it also measures end to end against a running
daemon: POST /v1/jobs (render_invoice, sign false), then polls GET
/v1/jobs/{id} until every job is ready or failed.

Prints a table; the last line is one JSON object with every figure.

    .venv/bin/python scripts/bench_invoice.py [--one N] [--big N] [--procs 2]
        [--url http://127.0.0.1:8787 --token TOKEN --e2e N --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, wait
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from casesignd import config as config_mod  # noqa: E402
from casesignd.invoice import admit, issuer_of  # noqa: E402
from casesignd.invoice_layout import register_fonts  # noqa: E402
from casesignd.invoice_templates import TEMPLATES, render_to_file  # noqa: E402

VERSION = "invoice-v3"
CFG = config_mod.loads(
    '[invoice]\nissuer_name = "Example University"\n'
    'issuer_address = ["1 Campus Road", "Springfield 12345"]\ntax_rate = "0.2"\n'
    'tax_label = "VAT"\nmax_items = 10000\n'
)
ISSUER = issuer_of(CFG)


def request(lines: int, order_id: str = "EDU-1042") -> dict[str, Any]:
    items = [{"description": f"Course module {i + 1}: laboratory practice and assessment",
              "quantity": i % 4 + 1, "unit_price": f"{(i * 37) % 500}.{(i * 13) % 100:02d}"}
             for i in range(lines)]  # fmt: skip
    if lines == 1:
        items = [{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}]
    return {"kind": "render_invoice", "template_version": VERSION, "sign": False,
            "order": {"order_id": order_id, "student_name": "Avery Chen", "currency": "USD",
                      "items": items}}  # fmt: skip


def bench_direct(invoice: dict[str, Any], n: int) -> dict[str, float]:
    render = TEMPLATES[VERSION].render
    render(invoice, ISSUER, io.BytesIO())  # warm: fonts, styles
    times = []
    for _ in range(n):
        t = time.perf_counter()
        render(invoice, ISSUER, io.BytesIO())
        times.append(time.perf_counter() - t)
    return {"ms_median": statistics.median(times) * 1e3,
            "ms_p95": sorted(times)[int(0.95 * (n - 1))] * 1e3,
            "per_s": n / sum(times)}  # fmt: skip


def _warm() -> None:
    register_fonts()


def bench_pool(invoice: dict[str, Any], n: int, procs: int, tmp: Path) -> dict[str, float]:
    with ProcessPoolExecutor(max_workers=procs, initializer=_warm) as pool:
        # Warm every worker (process start, imports, font registration) first.
        wait([pool.submit(render_to_file, invoice, VERSION, str(tmp / f"w{i}.pdf"), ISSUER)
              for i in range(procs * 2)])  # fmt: skip
        t = time.perf_counter()
        futures = [pool.submit(render_to_file, invoice, VERSION, str(tmp / f"{i % 64}.pdf"), ISSUER)
                   for i in range(n)]  # fmt: skip
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - t
    return {"per_s": n / elapsed, "ms_per_invoice": elapsed / n * 1e3}


def bench_admit(body: dict[str, Any], n: int) -> dict[str, float]:
    admit(body, CFG, date(2026, 11, 29))
    t = time.perf_counter()
    for _ in range(n):
        admit(body, CFG, date(2026, 11, 29))
    return {"us": (time.perf_counter() - t) / n * 1e6}


async def bench_http(url: str, token: str, n: int, concurrency: int,
                     lines: int = 1) -> dict[str, float]:
    """End to end: submit n invoices of ``lines`` lines, poll until all finished."""
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"}
    sem = asyncio.Semaphore(concurrency)
    run_id = os.urandom(4).hex()
    states: dict[str, int] = {}

    async def one(session: aiohttp.ClientSession, i: int) -> float:
        async with sem:
            t = time.perf_counter()
            body = request(lines, order_id=f"BENCH-{run_id}-{i}")
            while True:
                async with session.post(
                    f"{url}/v1/jobs", json=body,
                    headers={**headers, "Idempotency-Key": f"bench-{run_id}-{i}"},
                ) as r:  # fmt: skip
                    if r.status in (429, 503):  # queue_full / busy: come back later
                        states["refused"] = states.get("refused", 0) + 1
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    if r.status not in (200, 202):
                        raise RuntimeError(f"POST /v1/jobs answered {r.status}: {await r.text()}")
                    job_id = (await r.json())["job_id"]
                    post_status = r.status
                    break
            pause = 0.01  # polls back off to 100 ms so they do not load the server much
            while True:
                async with session.get(f"{url}/v1/jobs/{job_id}", headers=headers) as r:
                    if r.status == 404 and states.get("not_found", 0) < 10 * n:
                        # An acknowledged job must be readable at once; count every
                        # miss (it is reported) and keep polling to finish the run.
                        states["not_found"] = states.get("not_found", 0) + 1
                        await asyncio.sleep(0.01)
                        continue
                    if r.status != 200:
                        raise RuntimeError(
                            f"GET /v1/jobs/{job_id} answered {r.status} after POST "
                            f"{post_status}: {await r.text()}"
                        )
                    state = (await r.json())["state"]
                if state in ("ready", "failed", "canceled"):
                    states[state] = states.get(state, 0) + 1
                    return time.perf_counter() - t
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.1)

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t = time.perf_counter()
        latencies = await asyncio.gather(*(one(session, i) for i in range(n)))
        elapsed = time.perf_counter() - t
    return {"per_s": n / elapsed, "latency_ms_median": statistics.median(latencies) * 1e3,
            "ready": states.get("ready", 0), "failed": states.get("failed", 0),
            "refused_retried": states.get("refused", 0),
            "not_found_after_ack": states.get("not_found", 0)}  # fmt: skip


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, default=400, help="one-line invoices per measurement")
    ap.add_argument("--big", type=int, default=20, help="300-line invoices per measurement")
    ap.add_argument("--procs", type=int, default=2, help="process pool size")
    ap.add_argument("--url", help="a running daemon, e.g. http://127.0.0.1:8787 "
                    "(default: start one on loopback for the run)")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end run")
    ap.add_argument("--token", default=os.environ.get("CASESIGND_TOKEN", ""))
    ap.add_argument("--e2e", type=int, default=600, help="jobs for the end-to-end run")
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args(argv)

    one = admit(request(1), CFG, date(2026, 11, 29)).normalized
    big = admit(request(300), CFG, date(2026, 11, 29)).normalized
    result: dict[str, Any] = {"template": VERSION, "procs": args.procs, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-invoice-") as tmp:
        result["one_direct"] = bench_direct(one, args.one)
        result["one_pool"] = bench_pool(one, args.one, args.procs, Path(tmp))
        result["big_direct"] = bench_direct(big, args.big)
        result["big_pool"] = bench_pool(big, args.big, args.procs, Path(tmp))
    result["admit_one"] = bench_admit(request(1), 2000)
    result["admit_big"] = bench_admit(request(300), 50)
    if args.url:
        result["one_http"] = asyncio.run(
            bench_http(args.url.rstrip("/"), args.token, args.e2e, args.concurrency)
        )
    elif not args.no_e2e:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.daemon import Daemon

        with tempfile.TemporaryDirectory(prefix="bench-invoice-daemon-") as tmp:
            d = Daemon(Path(tmp) / "d", {"workers": {"concurrency": 8},
                                         "logging": {"level": "warning"}},
                       env={"CASESIGND_STRICT_LABELS": "0"})
            d.start()
            try:
                result["one_http"] = asyncio.run(
                    bench_http(d.url, d.token, args.e2e, args.concurrency))
                result["big_http"] = asyncio.run(
                    bench_http(d.url, d.token, max(20, args.e2e // 20), args.concurrency, 300))
            finally:
                d.stop()

    rows = [
        ("one-line", "direct (1 core)", f"{result['one_direct']['ms_median']:.2f} ms median, "
         f"{result['one_direct']['ms_p95']:.2f} ms p95", f"{result['one_direct']['per_s']:.0f}/s"),
        ("one-line", f"render_to_file pool({args.procs})",
         f"{result['one_pool']['ms_per_invoice']:.2f} ms wall each", f"{result['one_pool']['per_s']:.0f}/s"),
        ("300-line", "direct (1 core)", f"{result['big_direct']['ms_median']:.1f} ms median, "
         f"{result['big_direct']['ms_p95']:.1f} ms p95", f"{result['big_direct']['per_s']:.1f}/s"),
        ("300-line", f"render_to_file pool({args.procs})",
         f"{result['big_pool']['ms_per_invoice']:.1f} ms wall each", f"{result['big_pool']['per_s']:.1f}/s"),
        ("one-line", "admit", f"{result['admit_one']['us']:.0f} us", ""),
        ("300-line", "admit", f"{result['admit_big']['us'] / 1000:.2f} ms", ""),
    ]  # fmt: skip
    for key, label in (("one_http", "one-line"), ("big_http", "300-line")):
        if key in result:
            h = result[key]
            rows.append((label, f"HTTP end to end (c={args.concurrency})",
                         f"{h['latency_ms_median']:.0f} ms median latency, {h['failed']} failed, "
                         f"{h['not_found_after_ack']} 404s",
                         f"{h['per_s']:.1f}/s"))  # fmt: skip
    print(f"{'invoice':<10} {'path':<26} {'time':<36} {'throughput':>10}")
    for r in rows:
        print(f"{r[0]:<10} {r[1]:<26} {r[2]:<36} {r[3]:>10}")
    print(json.dumps(_rounded(result), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Invoice rendering benchmark: direct reportlab calls against the process pool.

Renders a one-line and a 300-line invoice with invoice-v3 and, in the same run,
with invoice-v4 for each of ``--locales`` (default ``de-DE,ar-EG``: EUR, left to
right, with invoice-v3's descriptions; EGP, right to left, Arabic issuer, labels,
names and descriptions, so every line is shaped and reordered), each locale's
settings a tenant's as :func:`casesignd.invoices.branding.load` resolves them:

- ``direct``: the template's render function called in this process into
  memory, one core: the cost of the layout itself;
- ``pool(N)``: :func:`casesignd.invoices.layout.render_to_file` through a
  ``ProcessPoolExecutor`` of N workers (default 2) writing files, as the worker
  pool runs it: throughput with pickling and file I/O;
- ``admit``: the admission (validation and normalization) per request.

The invoice-v4 rows say what each costs against invoice-v3's (``vs v3``, time
over time). The end-to-end run below is invoice-v3's.

With ``--url URL --token TOKEN`` it also measures end to end against a running
daemon: POST /v1/jobs (render_invoice, sign false), then polls GET
/v1/jobs/{id} until every job is ready or failed.

Prints a table; the last line is one JSON object with every figure: invoice-v3's
under the keys ``one_direct``, ``big_pool``, ``admit_one`` ...; invoice-v4's under
the same names prefixed ``v4_<locale>_`` (``v4_de_DE_one_direct``,
``v4_ar_EG_admit_big``).

    .venv/bin/python scripts/bench_invoice.py [--one N] [--big N] [--procs 2]
        [--locales de-DE,ar-EG]
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
from casesignd.invoices import branding  # noqa: E402
from casesignd.invoices.branding import InvoiceSettings  # noqa: E402
from casesignd.invoices.templates import TEMPLATES, render_to_file  # noqa: E402
from casesignd.job_kinds.render_invoice import admit, issuer_of, render_issuer  # noqa: E402
from casesignd.text.faces import register_fonts  # noqa: E402
from casesignd.text.shaping import register as register_v4_fonts  # noqa: E402

VERSION = "invoice-v3"
CFG = config_mod.loads(
    '[invoice]\nissuer_name = "Example University"\n'
    'issuer_address = ["1 Campus Road", "Springfield 12345"]\ntax_rate = "0.2"\n'
    'tax_label = "VAT"\nmax_items = 10000\n'
)
ISSUER = issuer_of(CFG)
TODAY = date(2026, 11, 29)

V4 = "invoice-v4"
_V4_BASE = '[invoice]\ndefault_template = "invoice-v4"\nmax_items = 10000\n'
# locale: (currency, student, (the one-line invoice's description, the description of
# line i of the others) or None for invoice-v3's, the rest of [invoice])
V4_LOCALES: dict[str, tuple[str, str, tuple[str, str] | None, str]] = {
    "de-DE": ("EUR", "Jürgen Groß", None, """
issuer_name = "Städtische Musikschule Berlin"
issuer_address = ["Hauptstraße 1", "10115 Berlin"]
issuer_tax_ids = ["USt-IdNr. DE123456789"]
tax_rate = "0.19"
tax_label = "MwSt."
footer = ["Bankverbindung: IBAN DE02 1203 0000 0000 2020 51"]
locale = "de-DE"
[invoice.labels]
invoice = "RECHNUNG"
invoice_no = "Rechnungsnr."
issue_date = "Datum"
bill_to = "An"
description = "Beschreibung"
quantity = "Menge"
unit_price = "Einzelpreis"
amount = "Betrag"
subtotal = "Zwischensumme"
total = "Gesamt"
page = "Seite {page} von {pages}"
"""),
    "ar-EG": ("EGP", "أحمد محمد", ("مقرر معملي", "وحدة المقرر {}: تدريب معملي وتقييم"), """
issuer_name = "جامعة القاهرة"
issuer_address = ["شارع الجامعة، الجيزة"]
issuer_tax_ids = ["الرقم الضريبي 123-456-789"]
tax_rate = "0.14"
tax_label = "ضريبة القيمة المضافة"
footer = ["شكرا لكم"]
locale = "ar-EG"
[invoice.labels]
invoice = "فاتورة"
invoice_no = "رقم الفاتورة"
issue_date = "التاريخ"
bill_to = "إلى"
description = "الوصف"
quantity = "الكمية"
unit_price = "سعر الوحدة"
amount = "المبلغ"
subtotal = "المجموع الفرعي"
total = "الإجمالي"
page = "صفحة {page} من {pages}"
"""),
}


def request(lines: int, order_id: str = "EDU-1042") -> dict[str, Any]:
    items = [{"description": f"Course module {i + 1}: laboratory practice and assessment",
              "quantity": i % 4 + 1, "unit_price": f"{(i * 37) % 500}.{(i * 13) % 100:02d}"}
             for i in range(lines)]  # fmt: skip
    if lines == 1:
        items = [{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}]
    return {"kind": "render_invoice", "template_version": VERSION, "sign": False,
            "order": {"order_id": order_id, "student_name": "Avery Chen", "currency": "USD",
                      "items": items}}  # fmt: skip


def v4_setup(locale: str) -> tuple[config_mod.Config, InvoiceSettings]:
    """The config and resolved (checked) settings of a tenant invoicing in ``locale``."""
    cfg = config_mod.loads(_V4_BASE + V4_LOCALES[locale][3])
    return cfg, branding.load(cfg, None).default


def v4_request(locale: str, lines: int) -> dict[str, Any]:
    """:func:`request`'s invoice for invoice-v4, in ``locale``'s currency and language."""
    currency, student, descriptions, _ = V4_LOCALES[locale]
    body = request(lines)
    body["template_version"] = V4
    body["order"].update(currency=currency, student_name=student)
    if descriptions is not None:
        for i, item in enumerate(body["order"]["items"]):
            item["description"] = descriptions[lines > 1].format(i + 1)
    return body


def bench_direct(invoice: dict[str, Any], n: int, version: str = VERSION,
                 issuer: dict[str, Any] = ISSUER) -> dict[str, float]:
    render = TEMPLATES[version].render
    render(invoice, issuer, io.BytesIO())  # warm: fonts, styles
    times = []
    for _ in range(n):
        t = time.perf_counter()
        render(invoice, issuer, io.BytesIO())
        times.append(time.perf_counter() - t)
    return {"ms_median": statistics.median(times) * 1e3,
            "ms_p95": sorted(times)[int(0.95 * (n - 1))] * 1e3,
            "per_s": n / sum(times)}  # fmt: skip


def _warm() -> None:
    register_fonts()


def _warm_v4() -> None:
    register_v4_fonts()


def bench_pool(invoice: dict[str, Any], n: int, procs: int, tmp: Path, version: str = VERSION,
               issuer: dict[str, Any] = ISSUER) -> dict[str, float]:
    warm = _warm_v4 if TEMPLATES[version].branded else _warm
    with ProcessPoolExecutor(max_workers=procs, initializer=warm) as pool:
        # Warm every worker (process start, imports, font registration) first.
        wait([pool.submit(render_to_file, invoice, version, str(tmp / f"w{i}.pdf"), issuer)
              for i in range(procs * 2)])  # fmt: skip
        t = time.perf_counter()
        futures = [pool.submit(render_to_file, invoice, version, str(tmp / f"{i % 64}.pdf"), issuer)
                   for i in range(n)]  # fmt: skip
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - t
    return {"per_s": n / elapsed, "ms_per_invoice": elapsed / n * 1e3}


def bench_admit(body: dict[str, Any], n: int, cfg: config_mod.Config = CFG,
                settings: InvoiceSettings | None = None) -> dict[str, float]:
    admit(body, cfg, TODAY, settings)  # warm: font coverage, CLDR data
    t = time.perf_counter()
    for _ in range(n):
        admit(body, cfg, TODAY, settings)
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


def _locales(value: str) -> list[str]:
    tags = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in tags if t not in V4_LOCALES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"no invoice-v4 settings for {', '.join(unknown)}; known: {', '.join(V4_LOCALES)}")
    return tags


def _key(locale: str) -> str:
    """The JSON key prefix of ``locale``'s invoice-v4 figures: ``v4_de_DE_``."""
    return f"v4_{locale.replace('-', '_')}_"


def _render_rows(result: dict[str, Any], prefix: str, template: str, procs: int,
                 ) -> list[tuple[str, str, str, str, str, str]]:
    """The table rows of one template's (and locale's) figures, ``vs v3`` for invoice-v4."""

    def vs(measure: str, field: str) -> str:
        if not prefix:
            return ""
        return f"{result[prefix + measure][field] / result[measure][field]:.2f}x"

    r = {m: result[prefix + m] for m in ("one_direct", "one_pool", "big_direct", "big_pool",
                                         "admit_one", "admit_big")}  # fmt: skip
    return [
        ("one-line", template, "direct (1 core)", f"{r['one_direct']['ms_median']:.2f} ms median, "
         f"{r['one_direct']['ms_p95']:.2f} ms p95", f"{r['one_direct']['per_s']:.0f}/s",
         vs("one_direct", "ms_median")),
        ("one-line", template, f"render_to_file pool({procs})",
         f"{r['one_pool']['ms_per_invoice']:.2f} ms wall each", f"{r['one_pool']['per_s']:.0f}/s",
         vs("one_pool", "ms_per_invoice")),
        ("300-line", template, "direct (1 core)", f"{r['big_direct']['ms_median']:.1f} ms median, "
         f"{r['big_direct']['ms_p95']:.1f} ms p95", f"{r['big_direct']['per_s']:.1f}/s",
         vs("big_direct", "ms_median")),
        ("300-line", template, f"render_to_file pool({procs})",
         f"{r['big_pool']['ms_per_invoice']:.1f} ms wall each", f"{r['big_pool']['per_s']:.1f}/s",
         vs("big_pool", "ms_per_invoice")),
        ("one-line", template, "admit", f"{r['admit_one']['us']:.0f} us", "",
         vs("admit_one", "us")),
        ("300-line", template, "admit", f"{r['admit_big']['us'] / 1000:.2f} ms", "",
         vs("admit_big", "us")),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, default=150,
                    help="one-line invoices per measurement (each template and locale)")
    ap.add_argument("--big", type=int, default=5,
                    help="300-line invoices per measurement (each template and locale)")
    ap.add_argument("--procs", type=int, default=2, help="process pool size")
    ap.add_argument("--locales", type=_locales, default=list(V4_LOCALES),
                    help=f"invoice-v4's locales, comma separated (default: {','.join(V4_LOCALES)}; "
                    "empty: invoice-v3 only)")
    ap.add_argument("--url", help="a running daemon, e.g. http://127.0.0.1:8787 "
                    "(default: start one on loopback for the run)")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end run")
    ap.add_argument("--token", default=os.environ.get("CASESIGND_TOKEN", ""))
    ap.add_argument("--e2e", type=int, default=600, help="jobs for the end-to-end run")
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args(argv)

    one = admit(request(1), CFG, TODAY).normalized
    big = admit(request(300), CFG, TODAY).normalized
    result: dict[str, Any] = {"template": VERSION, "procs": args.procs, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-invoice-") as tmp:
        result["one_direct"] = bench_direct(one, args.one)
        result["one_pool"] = bench_pool(one, args.one, args.procs, Path(tmp))
        result["big_direct"] = bench_direct(big, args.big)
        result["big_pool"] = bench_pool(big, args.big, args.procs, Path(tmp))
    result["admit_one"] = bench_admit(request(1), 2000)
    result["admit_big"] = bench_admit(request(300), 50)
    if args.locales:
        result["v4_template"] = V4
        result["v4_locales"] = {tag: V4_LOCALES[tag][0] for tag in args.locales}
    for tag in args.locales:
        cfg, settings = v4_setup(tag)
        k = _key(tag)
        with tempfile.TemporaryDirectory(prefix="bench-invoice-v4-") as tmp:
            for size, lines, n in (("one", 1, args.one), ("big", 300, args.big)):
                body = v4_request(tag, lines)
                invoice = admit(body, cfg, TODAY, settings).normalized
                issuer = render_issuer(invoice, cfg)
                result[f"{k}{size}_direct"] = bench_direct(invoice, n, V4, issuer)
                result[f"{k}{size}_pool"] = bench_pool(invoice, n, args.procs, Path(tmp), V4,
                                                       issuer)
        result[f"{k}admit_one"] = bench_admit(v4_request(tag, 1), 2000, cfg, settings)
        # Fewer: an Arabic 300-line admission takes some 50 ms (each line's glyph check).
        result[f"{k}admit_big"] = bench_admit(v4_request(tag, 300), 20, cfg, settings)
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
                       test_parts=False)
            d.start()
            try:
                result["one_http"] = asyncio.run(
                    bench_http(d.url, d.token, args.e2e, args.concurrency))
                result["big_http"] = asyncio.run(
                    bench_http(d.url, d.token, max(20, args.e2e // 20), args.concurrency, 300))
            finally:
                d.stop()

    # Each measurement's invoice-v3 row, then its invoice-v4 rows, one per locale.
    tables = [_render_rows(result, "", "v3", args.procs)]
    tables += [_render_rows(result, _key(tag), f"v4 {tag}", args.procs) for tag in args.locales]
    rows = [row for same in zip(*tables, strict=True) for row in same]
    for key, label in (("one_http", "one-line"), ("big_http", "300-line")):
        if key in result:
            h = result[key]
            rows.append((label, "v3", f"HTTP end to end (c={args.concurrency})",
                         f"{h['latency_ms_median']:.0f} ms median latency, {h['failed']} failed, "
                         f"{h['not_found_after_ack']} 404s",
                         f"{h['per_s']:.1f}/s", ""))  # fmt: skip
    print(f"{'invoice':<10} {'template':<10} {'path':<26} {'time':<36} {'throughput':>10} "
          f"{'vs v3':>6}")
    for r in rows:
        print(f"{r[0]:<10} {r[1]:<10} {r[2]:<26} {r[3]:<36} {r[4]:>10} {r[5]:>6}")
    print(json.dumps(_rounded(result), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
